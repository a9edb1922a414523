//! A load client for a long `serve` run: `REQUESTS` requests over
//! `CLIENTS` keep-alive connections (whole and streamed completions and
//! chats with distinct prompts, every tenth a client leaving mid-stream,
//! every twentieth a refused one), printing the server's resident set
//! (`VmRSS` of `/proc/PID/status`) every `EVERY` requests.
//!
//! ```sh
//! target/release/handoff-mocker serve --prefill 1 --decode 1 --http 127.0.0.1:8000 --speed 50 &
//! cargo run -q -p handoff-serve --example rss_load -- 127.0.0.1:8000 $! 100000 8 10000
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rss_kb(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn post(path: &str, body: &str, close: bool) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{}\r\n{body}",
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
}

/// Reads one response (by length, or chunked to its last chunk); its status.
fn response(r: &mut BufReader<TcpStream>) -> std::io::Result<u16> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (mut len, mut chunked) = (0usize, false);
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        chunked |= l == "transfer-encoding: chunked";
    }
    if !chunked {
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        return Ok(status);
    }
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let n = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk)?;
        if n == 0 {
            return Ok(status);
        }
    }
}

fn body(i: usize) -> (&'static str, String, bool) {
    let words: String = (0..24)
        .map(|j| format!("w{} ", (i * 31 + j * 7) % 100_003))
        .collect();
    match i % 20 {
        0 => (
            "/v1/completions",
            format!(r#"{{"model":"handoff-mocker","prompt":"{words}","top_p":-1}}"#),
            false,
        ),
        5 | 15 => (
            "/v1/completions",
            format!(
                r#"{{"model":"handoff-mocker","prompt":"{words}","max_tokens":300,"ignore_eos":true,"stream":true}}"#
            ),
            true,
        ),
        k if k % 3 == 0 => (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"handoff-mocker","messages":[{{"role":"user","content":"{words}"}}],"max_tokens":8,"stream":true,"stream_options":{{"include_usage":true}}}}"#
            ),
            false,
        ),
        k if k % 3 == 1 => (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"handoff-mocker","messages":[{{"role":"user","content":"{words}"}}],"max_tokens":8}}"#
            ),
            false,
        ),
        _ => (
            "/v1/completions",
            format!(r#"{{"model":"handoff-mocker","prompt":"{words}","max_tokens":8}}"#),
            false,
        ),
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: rss_load ADDR PID REQUESTS CLIENTS EVERY");
        std::process::exit(2);
    }
    let addr = a[1].clone();
    let pid = a[2].clone();
    let total: usize = a[3].parse().expect("REQUESTS");
    let clients: usize = a[4].parse().expect("CLIENTS");
    let every: usize = a[5].parse().expect("EVERY");
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    println!("requests\tVmRSS_kB\tseconds");
    println!("0\t{}\t0.0", rss_kb(&pid));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (addr, pid, next, failed) =
                (addr.clone(), pid.clone(), next.clone(), failed.clone());
            std::thread::spawn(move || {
                let s = TcpStream::connect(&addr).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(60))).ok();
                let mut w = s.try_clone().expect("clone");
                let mut r = BufReader::new(s);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    let (path, b, leaves) = body(i);
                    if leaves {
                        let mut c = TcpStream::connect(&addr).expect("connect");
                        let _ = c.write_all(post(path, &b, true).as_bytes());
                        let mut first = [0u8; 256];
                        let _ = c.read(&mut first);
                    } else {
                        w.write_all(post(path, &b, false).as_bytes())
                            .expect("write");
                        let status = response(&mut r).expect("a response");
                        let want = if i % 20 == 0 { 400 } else { 200 };
                        if status != want {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if (i + 1) % every == 0 {
                        println!(
                            "{}\t{}\t{:.1}",
                            i + 1,
                            rss_kb(&pid),
                            t0.elapsed().as_secs_f64()
                        );
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client");
    }
    std::thread::sleep(Duration::from_secs(2));
    println!(
        "# after 2 s idle: VmRSS {} kB; {} unexpected statuses; {:.1} s",
        rss_kb(&pid),
        failed.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64()
    );
}
