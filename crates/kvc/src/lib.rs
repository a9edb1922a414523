//! Session-affine serving with D->P snapshot push (in progress).
