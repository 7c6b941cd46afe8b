#!/usr/bin/python3
"""Hello world in every language over HTTP, side by side with the bare toolchain on the host.

For each language, against one `sandboxd serve` on loopback with a warm pool of one entry per
language (kept-alive connection, the executions' client wall time):
  new source   a program the compile cache has not seen (each round's source differs by a
               comment): the compile stage and the run
  same source  the same program again and again: for a compiled language a compile cache hit,
               then the run
  run stage    the warm runs' engine time of the run alone (timing.total_us of the run stage)
  binary       (compiled languages) the artifact the host's toolchain built, uploaded as an
               executable file and started by `exec ./main` (language sh): what running the
               binary under sandboxd costs without the cache
  bare         on the host, unsandboxed: the toolchain's compile and the run (subprocess.run of
               `sh -c 'COMPILE && RUN'`), and the run alone
and the issue's two ratios: a warm shell `exec /bin/true` over HTTP against bare
`sh -c 'exec /bin/true'` plus the round trip of an empty HTTP request (GET of an unknown path,
answered 404 by the API alone), and warm JavaScript against bare `node -e`.
Rounds of each variant are interleaved across languages; the first round of each is discarded.

usage: bench/languages.py --sandboxd build/sandboxd [--rounds N] [--cold-rounds N] [--out FILE]
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import Server  # noqa: E402

JDK = "/usr/lib/jvm/default-java/bin/"

# language: (source file, program, the host's compile command (None: none), the host's run argv)
LANGUAGES = {
    "python": ("main.py", 'print("hello")\n', None, ["/usr/bin/python3", "main.py"]),
    "bash": ("main.sh", "echo hello\n", None, ["/bin/bash", "main.sh"]),
    "javascript": ("main.js", 'console.log("hello");\n', None, ["/usr/bin/node", "main.js"]),
    "typescript": ("main.ts", 'const s: string = "hello";\nconsole.log(s);\n',
                   None, None),
    "c": ("main.c", '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n',
          "/usr/bin/gcc -O2 -std=gnu17 -o main main.c -lm", ["./main"]),
    "cpp": ("main.cpp", '#include <iostream>\nint main() { std::cout << "hello" << std::endl; }\n',
            "/usr/bin/g++ -O2 -std=gnu++20 -o main main.cpp -lm", ["./main"]),
    "go": ("main.go", 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello") }\n',
           "GOCACHE=$PWD/.gocache GO111MODULE=off CGO_ENABLED=0 /usr/bin/go build -o main main.go",
           ["./main"]),
    "rust": ("main.rs", 'fn main() { println!("hello"); }\n',
             "/usr/bin/rustc -O --edition 2021 -C strip=debuginfo -o main main.rs", ["./main"]),
    "java": ("Main.java",
             'public class Main { public static void main(String[] a) { System.out.println("hello"); } }\n',
             f"{JDK}javac -d classes Main.java && {JDK}jar --create --file main.jar "
             "--main-class Main -C classes .", [f"{JDK}java", "-jar", "main.jar"]),
}
COMPILED = ("c", "cpp", "go", "rust")  # a native binary: the "binary" variant applies


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def comment(language, n):
    return {"python": f"# {n}\n", "bash": f"# {n}\n"}.get(language, f"// {n}\n")


class Client:
    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, body, expect="hello\n"):
        start = time.perf_counter_ns()
        self.conn.request("POST", "/v1/executions", json.dumps(body), self.headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = (time.perf_counter_ns() - start) / 1e6
        result = json.loads(data)
        if response.status != 200 or result.get("status") != "ok" or \
                result.get("stdout") != expect:
            raise RuntimeError(f"{body.get('language')}: {response.status} {data[:600]!r}")
        return elapsed, result


def bare(workdir, language, rounds):
    """(compile + run ms, run ms) medians on the host."""
    name, program, compile_cmd, run_argv = LANGUAGES[language]
    if run_argv is None:
        return None, None
    d = os.path.join(workdir, "bare-" + language)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w") as f:
        f.write(program)
    both, alone = [], []
    for i in range(rounds + 1):
        with open(os.path.join(d, name), "w") as f:
            f.write(program + comment(language, i))
        start = time.perf_counter()
        if compile_cmd:
            subprocess.run(["/bin/sh", "-c", compile_cmd], cwd=d, check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run(run_argv, cwd=d, check=True, stdout=subprocess.DEVNULL)
        middle = time.perf_counter()
        subprocess.run(run_argv, cwd=d, check=True, stdout=subprocess.DEVNULL)
        end = time.perf_counter()
        if i:
            both.append((middle - start) * 1000)
            alone.append((end - middle) * 1000)
    return statistics.median(both), statistics.median(alone)


def host_binary(workdir, language):
    d = os.path.join(workdir, "bare-" + language)
    os.makedirs(d, exist_ok=True)
    name, program, compile_cmd, _ = LANGUAGES[language]
    with open(os.path.join(d, name), "w") as f:
        f.write(program)
    subprocess.run(["/bin/sh", "-c", compile_cmd], cwd=d, check=True)
    with open(os.path.join(d, "main"), "rb") as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--cold-rounds", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()
    sandboxd = os.path.abspath(args.sandboxd)
    workdir = tempfile.mkdtemp(prefix="bench-languages-")
    server = None
    try:
        lines = subprocess.run([sandboxd, "token", "bench"], check=True, capture_output=True,
                               text=True).stdout
        token = re.search(r"^token: (\S+)$", lines, re.M).group(1)
        digest = re.search(r"^token_sha256 = (\S+)$", lines, re.M).group(1)
        server = Server(sandboxd, workdir, "languages", digest, 1, 16, 8,
                        pool_languages=tuple(LANGUAGES) + ("sh",))
        server.wait_ready()
        client = Client(server.port, token)
        import base64
        binaries = {lang: base64.b64encode(host_binary(workdir, lang)).decode()
                    for lang in COMPILED}

        cold = {lang: [] for lang in LANGUAGES}
        warm = {lang: [] for lang in LANGUAGES}
        run_stage = {lang: [] for lang in LANGUAGES}
        binary = {lang: [] for lang in COMPILED}
        for i in range(args.cold_rounds + 1):
            for lang, (_, program, _, _) in LANGUAGES.items():
                ms, _ = client.post({"language": lang, "code": program + comment(lang, i)})
                if i:
                    cold[lang].append(ms)
        for i in range(args.rounds + 1):
            for lang, (_, program, _, _) in LANGUAGES.items():
                server.wait_quiet()
                ms, result = client.post({"language": lang, "code": program})
                if i:
                    warm[lang].append(ms)
                    run_stage[lang].append(result["timing"]["total_us"] / 1000)
                    if lang in COMPILED or lang in ("typescript", "java"):
                        assert result["compile"]["cached"] is True, result["compile"]
            for lang in COMPILED:
                server.wait_quiet()
                ms, _ = client.post({
                    "language": "sh", "entrypoint": "run.sh",
                    "files": [{"path": "run.sh", "content": "exec ./main\n"},
                              {"path": "main", "content": binaries[lang],
                               "encoding": "base64", "executable": True}]})
                if i:
                    binary[lang].append(ms)
        # The two ratios of issue 14, interleaved.
        true_warm, empty_rtt, true_bare, node_bare = [], [], [], []
        for i in range(args.rounds + 1):
            server.wait_quiet()
            ms, _ = client.post({"language": "sh", "code": "exec /bin/true"}, expect="")
            start = time.perf_counter_ns()
            client.conn.request("GET", "/nothing-here", headers=client.headers)
            client.conn.getresponse().read()
            rtt = (time.perf_counter_ns() - start) / 1e6
            start = time.perf_counter_ns()
            subprocess.run(["/bin/sh", "-c", "exec /bin/true"], check=True)
            bare_true = (time.perf_counter_ns() - start) / 1e6
            start = time.perf_counter_ns()
            subprocess.run(["/usr/bin/node", "-e", 'console.log("hello")'], check=True,
                           stdout=subprocess.DEVNULL)
            bare_node = (time.perf_counter_ns() - start) / 1e6
            if i:
                true_warm.append(ms)
                empty_rtt.append(rtt)
                true_bare.append(bare_true)
                node_bare.append(bare_node)
        bare_times = {lang: bare(workdir, lang, max(3, args.cold_rounds)) for lang in LANGUAGES}
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# Hello world in every language: sandboxd over HTTP against the bare toolchain",
        "",
        f"{now}, {platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}; "
        f"`bench/languages.py --sandboxd {args.sandboxd} --rounds {args.rounds} "
        f"--cold-rounds {args.cold_rounds}` (client wall time of POST /v1/executions on a "
        "kept-alive loopback connection; first round of each variant discarded).",
        "",
        "| language | new source p50 ms | same source p50 ms | same source p95 ms "
        "| run stage p50 ms | binary p50 ms | same / binary | bare compile+run ms | bare run ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lang in LANGUAGES:
        both, alone = bare_times[lang]
        b = statistics.median(binary[lang]) if lang in binary else None
        w = statistics.median(warm[lang])
        out.append(
            f"| {lang} | {statistics.median(cold[lang]):.1f} | {w:.2f} | "
            f"{percentile(warm[lang], 95):.2f} | {statistics.median(run_stage[lang]):.2f} | "
            f"{'%.2f' % b if b else '-'} | {'%.2f' % (w / b) if b else '-'} | "
            f"{'%.1f' % both if both else '-'} | {'%.2f' % alone if alone else '-'} |")
    warm_true = statistics.median(true_warm)
    rtt = statistics.median(empty_rtt)
    bare_true = statistics.median(true_bare)
    warm_js = statistics.median(warm["javascript"])
    bare_node = statistics.median(node_bare)
    out += [
        "",
        "new source: a source the compile cache has not seen (compile stage + run); same source: "
        "the same source again (a cache hit for the compiled languages, then the run); run "
        "stage: the engine's time for that run's sandbox alone; binary: the host-built binary "
        "uploaded and started by `exec ./main` in a sh execution (the target: same source ≤ 1.2 "
        "× binary for C, C++, Go and Rust). Every language runs from a warm pool entry (Python "
        "and JavaScript/TypeScript in their loaders, the others in an exec entry), and a "
        "compile stage in the entry's compile sandbox. "
        "bare: on the host without any sandbox.",
        "",
        "| ratio (issue 14) | sandboxd p50 ms | against p50 ms | ratio | target |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| warm sh `exec /bin/true` over HTTP / (bare `sh -c 'exec /bin/true'` + empty HTTP "
        f"round trip) | {warm_true:.2f} | {bare_true:.2f} + {rtt:.2f} | "
        f"{warm_true / (bare_true + rtt):.2f} | ≤ 1.5 |",
        f"| warm JavaScript over HTTP / bare `node -e` | {warm_js:.2f} | {bare_node:.2f} | "
        f"{warm_js / bare_node:.2f} | ≤ 0.3 |",
    ]
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
