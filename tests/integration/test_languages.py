"""Every language of the table (src/model/language.c) through `sandboxd run`, the engine code the
service runs: hello world, stdin, args and the exit code, an uncaught error, a compile error with
its diagnostic, a memory bomb, a fork or thread bomb, a timeout and a huge output; and for the
compiled ones, that the run gets its artifact read-only. Each cap's status is asserted with the
kernel's evidence behind it.

A language whose toolchain is not installed is skipped with the reason
(scripts/install-deps.sh installs them all)."""

import os
import re
import time

import pytest

from conftest import SANITIZED

JDK = "/usr/lib/jvm/default-java/bin/"

# name: (the file a program is saved as, the toolchain that must exist, whether it compiles)
LANGUAGES = {
    "c": ("main.c", "/usr/bin/gcc", True),
    "cpp": ("main.cpp", "/usr/bin/g++", True),
    "go": ("main.go", "/usr/bin/go", True),
    "rust": ("main.rs", "/usr/bin/rustc", True),
    "java": ("Main.java", JDK + "javac", True),
    "typescript": ("main.ts", "/usr/share/nodejs/typescript", True),
    "javascript": ("main.js", "/usr/bin/node", False),
}

# The sanitized build's stage runs the per-language tests for one compiled language and one
# interpreted one: sandboxd's code is the same for every language of a kind (the table is data);
# the other toolchains' time (70 s of that stage) is the normal build's stage's.
SANITIZED_LANGUAGES = {"c", "javascript"}


def each(languages):
    """The languages as pytest parameters, those the sanitized build's stage leaves out marked."""
    return [pytest.param(name, marks=pytest.mark.skipif(
        SANITIZED and name not in SANITIZED_LANGUAGES,
        reason="the normal build's stage runs it: one compiled language and one interpreted one "
               "cover sandboxd's code under the sanitizers"))
        for name in languages]


HELLO = {
    "c": '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n',
    "cpp": '#include <iostream>\nint main() { std::cout << "hello" << std::endl; }\n',
    "go": 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello") }\n',
    "rust": 'fn main() { println!("hello"); }\n',
    "java": 'public class Main { public static void main(String[] a) { System.out.println("hello"); } }\n',
    "typescript": 'const greeting: string = "hello";\nconsole.log(greeting);\n',
    "javascript": 'console.log("hello");\n',
}

# Reads a line of stdin, prints "in=<line> arg=<first argument>", exits 3.
ECHO = {
    "c": """#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    char line[64] = "";
    if (fgets(line, sizeof(line), stdin)) line[strcspn(line, "\\n")] = 0;
    printf("in=%s arg=%s\\n", line, argc > 1 ? argv[1] : "");
    return 3;
}
""",
    "cpp": """#include <iostream>
#include <string>
int main(int argc, char **argv) {
    std::string line;
    std::getline(std::cin, line);
    std::cout << "in=" << line << " arg=" << (argc > 1 ? argv[1] : "") << std::endl;
    return 3;
}
""",
    "go": """package main
import ("bufio"; "fmt"; "os"; "strings")
func main() {
    line, _ := bufio.NewReader(os.Stdin).ReadString('\\n')
    fmt.Printf("in=%s arg=%s\\n", strings.TrimSpace(line), os.Args[1])
    os.Exit(3)
}
""",
    "rust": """use std::io::BufRead;
fn main() {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let arg = std::env::args().nth(1).unwrap_or_default();
    println!("in={} arg={}", line.trim(), arg);
    std::process::exit(3);
}
""",
    "java": """import java.io.*;
public class Main {
    public static void main(String[] args) throws IOException {
        String line = new BufferedReader(new InputStreamReader(System.in)).readLine();
        System.out.println("in=" + line + " arg=" + args[0]);
        System.exit(3);
    }
}
""",
    "typescript": """const line: string = require("fs").readFileSync(0, "utf8").split("\\n")[0];
console.log(`in=${line} arg=${process.argv[2]}`);
process.exit(3);
""",
    "javascript": """const line = require("fs").readFileSync(0, "utf8").split("\\n")[0];
console.log(`in=${line} arg=${process.argv[2]}`);
process.exitCode = 3;
""",
}

# An uncaught error: (program, the status, what stderr says).
UNCAUGHT = {
    "c": ("#include <stdlib.h>\nint main(void) { abort(); }\n", "signaled", ""),
    "cpp": ('#include <stdexcept>\nint main() { throw std::runtime_error("boom"); }\n',
            "signaled", "boom"),
    "go": ('package main\nfunc main() { panic("boom") }\n', "exit_nonzero", "panic: boom"),
    "rust": ('fn main() { panic!("boom"); }\n', "exit_nonzero", "boom"),
    "java": ('public class Main { public static void main(String[] a) { throw new IllegalStateException("boom"); } }\n',
             "exit_nonzero", "IllegalStateException: boom"),
    "typescript": ('function f(): never { throw new Error("boom"); }\nf();\n', "exit_nonzero",
                   "Error: boom"),
    "javascript": ('Promise.reject(new Error("boom"));\n', "exit_nonzero", "Error: boom"),
}

# A program the compiler refuses, and a piece of its diagnostic.
COMPILE_ERROR = {
    "c": ("int main(void) { return undefined_name; }\n", "undefined_name"),
    "cpp": ("int main() { return undefined_name; }\n", "undefined_name"),
    "go": ("package main\nfunc main() { undefinedName() }\n", "undefinedName"),
    "rust": ("fn main() { undefined_name(); }\n", "undefined_name"),
    "java": ("public class Main { public static void main(String[] a) { undefinedName(); } }\n",
             "undefinedName"),
    "typescript": ("const x: number = ;\n", "error TS"),
}

# Allocates and touches memory without end.
MEMORY_BOMB = {
    "c": """#include <stdlib.h>
#include <string.h>
int main(void) { for (;;) { char *p = malloc(1 << 20); if (!p) return 1; memset(p, 1, 1 << 20); } }
""",
    "cpp": """#include <cstring>
#include <vector>
int main() { std::vector<char *> kept; for (;;) { char *p = new char[1 << 20]; std::memset(p, 1, 1 << 20); kept.push_back(p); } }
""",
    "go": """package main
func main() {
    var kept [][]byte
    for {
        b := make([]byte, 1<<20)
        for i := 0; i < len(b); i += 4096 { b[i] = 1 }
        kept = append(kept, b)
    }
}
""",
    "rust": """fn main() { let mut kept = Vec::new(); loop { kept.push(vec![1u8; 1 << 20]); } }
""",
    "java": """import java.util.*;
public class Main { public static void main(String[] a) { List<byte[]> kept = new ArrayList<>(); for (;;) { byte[] b = new byte[1 << 20]; Arrays.fill(b, (byte) 1); kept.add(b); } } }
""",
    "typescript": "const kept: Buffer[] = [];\nfor (;;) kept.push(Buffer.alloc(1 << 20, 1));\n",
    "javascript": "const kept = [];\nfor (;;) kept.push(Buffer.alloc(1 << 20, 1));\n",
}

# Starts processes or threads until the kernel refuses one, then exits non-zero (what it started
# goes with it).
BOMB = {
    "c": """#include <stdio.h>
#include <unistd.h>
int main(void) {
    int fds[2]; pipe(fds);
    for (int n = 0;; n++) {
        pid_t pid = fork();
        if (pid < 0) { printf("refused after %d\\n", n); return 1; }
        if (pid == 0) { char c; close(fds[1]); read(fds[0], &c, 1); _exit(0); }
    }
}
""",
    "cpp": """#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <thread>
int main() {
    for (int n = 0;; n++) {
        try { std::thread([] { std::this_thread::sleep_for(std::chrono::hours(1)); }).detach(); }
        catch (const std::system_error &) { std::printf("refused after %d\\n", n); std::fflush(stdout); std::_Exit(1); }
    }
}
""",
    "go": """package main
import "syscall"
func main() {
    // Each goroutine blocks in a system call, so each needs an OS thread of its own.
    for { go func() { var fds [2]int; syscall.Pipe(fds[:]); b := make([]byte, 1); syscall.Read(fds[0], b) }() }
}
""",
    "rust": """fn main() {
    for n in 0.. {
        let spawned = std::thread::Builder::new()
            .spawn(|| std::thread::sleep(std::time::Duration::from_secs(3600)));
        if spawned.is_err() { println!("refused after {}", n); std::process::exit(1); }
    }
}
""",
    "java": """public class Main {
    public static void main(String[] a) {
        for (int n = 0;; n++) {
            try { Thread t = new Thread(() -> { try { Thread.sleep(3600000); } catch (InterruptedException e) {} }); t.setDaemon(true); t.start(); }
            catch (Throwable e) { System.out.println("refused after " + n); System.exit(1); }
        }
    }
}
""",
    "typescript": """import { spawn } from "child_process";
let n = 0;
function more(): void {
  const child = spawn("/bin/sleep", ["3600"], { stdio: "ignore" });
  child.on("error", (e: Error) => { console.log(`refused after ${n}: ${e.message}`); process.exit(1); });
  child.on("spawn", () => { n++; more(); });
}
more();
""",
    "javascript": """const { spawn } = require("child_process");
let n = 0;
function more() {
  const child = spawn("/bin/sleep", ["3600"], { stdio: "ignore" });
  child.on("error", (e) => { console.log(`refused after ${n}: ${e.message}`); process.exit(1); });
  child.on("spawn", () => { n++; more(); });
}
more();
""",
}

# Never ends on its own.
SPIN = {
    "c": "int main(void) { volatile unsigned long n = 0; for (;;) n++; }\n",
    "cpp": "int main() { volatile unsigned long n = 0; for (;;) n++; }\n",
    "go": "package main\nfunc main() { n := 0; for { n++ } }\n",
    "rust": "fn main() { let mut n: u64 = 1; while n != 0 { n = n.wrapping_add(2); } println!(\"{}\", n); }\n",
    "java": "public class Main { public static void main(String[] a) { long n = 0; for (;;) n++; } }\n",
    "typescript": "let n: number = 0;\nfor (;;) n++;\n",
    "javascript": "let n = 0;\nfor (;;) n++;\n",
}

# Writes output without end.
FLOOD = {
    "c": '#include <stdio.h>\nint main(void) { for (;;) fputs("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\\n", stdout); }\n',
    "cpp": '#include <iostream>\nint main() { for (;;) std::cout << "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\\n"; }\n',
    "go": 'package main\nimport "os"\nfunc main() { b := []byte("yyyyyyyyyyyyyyyyyyyyyyyyy\\n"); for { os.Stdout.Write(b) } }\n',
    "rust": 'use std::io::Write;\nfn main() { let mut out = std::io::stdout(); loop { out.write_all(b"yyyyyyyyyyyyyyyyyyyyy\\n").unwrap(); } }\n',
    "java": 'public class Main { public static void main(String[] a) { for (;;) System.out.println("yyyyyyyyyyyyyyyyyyyyyy"); } }\n',
    "typescript": 'const line: string = "y".repeat(4096) + "\\n";\nfunction more(): void { while (process.stdout.write(line)) {} process.stdout.once("drain", more); }\nmore();\n',
    "javascript": 'const line = "y".repeat(4096) + "\\n";\nfunction more() { while (process.stdout.write(line)) {} process.stdout.once("drain", more); }\nmore();\n',
}


def need(language):
    toolchain = LANGUAGES[language][1]
    if not os.path.exists(toolchain):
        pytest.skip(f"SKIP: {language}: {toolchain} is not installed "
                    "(scripts/install-deps.sh installs it)")


@pytest.fixture
def run_language(run_file):
    def invoke(language, text, *flags, args=(), timeout=120):
        need(language)
        return run_file(LANGUAGES[language][0], text, *flags, args=args, timeout=timeout)
    return invoke


def expect_compiled(r, language):
    """A compiled language's result carries its compile stage, which succeeded."""
    if LANGUAGES[language][2]:
        assert r["compile"] is not None, r.describe()
        assert r["compile"]["status"] == "ok", f"{r['compile']}\n{r.describe()}"
        assert r["compile"]["cached"] is False
        assert r["compile"]["usage"]["cpu_ms"] > 0, r["compile"]  # the compiler ran
    else:
        assert r["compile"] is None, r.describe()


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_hello_world(run_language, language):
    r = run_language(language, HELLO[language])
    r.expect("ok", rc=0)
    assert r["stdout"] == "hello\n", r.describe()
    expect_compiled(r, language)


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_stdin_args_and_exit_code(run_language, language, tmp_path):
    need(language)
    (tmp_path / "stdin").write_text("a line\nanother\n")
    r = run_language(language, ECHO[language], "--stdin", str(tmp_path / "stdin"), args=("first",))
    r.expect("exit_nonzero", rc=3)
    assert r["exit_code"] == 3
    assert r["stdout"] == "in=a line arg=first\n", r.describe()


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_an_uncaught_error(run_language, language):
    program, status, said = UNCAUGHT[language]
    r = run_language(language, program)
    r.expect(status)
    assert said in r["stderr"], r.describe()
    expect_compiled(r, language)


@pytest.mark.parametrize("language", each(COMPILE_ERROR))
def test_a_compile_error_reports_the_diagnostic_and_runs_nothing(run_language, language):
    program, diagnostic = COMPILE_ERROR[language]
    r = run_language(language, program)
    r.expect("compile_error", rc=1)
    compile = r["compile"]
    assert compile["status"] == "exit_nonzero" and compile["exit_code"] != 0, compile
    assert diagnostic in compile["stderr"], compile
    assert "the compile ended exit_nonzero" in r["error"]
    # Nothing ran: no output, no usage of a run.
    assert r["stdout"] == "" and r["stderr"] == "" and r["usage"]["cpu_ms"] == 0, r.describe()
    assert r["exit_code"] is None


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_a_memory_bomb_hits_the_cap(run_language, language, host):
    host.require_controller("memory")
    r = run_language(language, MEMORY_BOMB[language], "--memory", "128M", "--timeout", "30s")
    r.expect("memory_limit", rc=125)
    assert r["evidence"]["oom_kills"] > 0, r.describe()
    expect_compiled(r, language)


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_a_process_or_thread_bomb_hits_the_cap(run_language, language, host):
    host.require_controller("pids")
    # Go's runtime prints every goroutine's stack when it cannot make a thread: room for it.
    r = run_language(language, BOMB[language], "--pids", "48", "--memory", "512M",
                     "--timeout", "30s", "--output", "16M")
    r.expect("pids_limit", rc=123)
    assert r["evidence"]["pids_max_events"] > 0, r.describe()
    assert r["evidence"]["wall_timeout"] is False, r.describe()


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_a_run_past_its_deadline_times_out(run_language, language):
    r = run_language(language, SPIN[language], "--timeout", "1s")
    r.expect("timeout", rc=124)
    assert r["evidence"]["wall_timeout"] is True, r.describe()
    expect_compiled(r, language)


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_a_huge_output_is_cut_at_the_cap(run_language, language):
    r = run_language(language, FLOOD[language], "--output", "64K", "--timeout", "30s")
    r.expect("output_limit", rc=122)
    assert r["truncated"]["stdout"] is True
    assert len(r["stdout"].encode()) <= 64 * 1024
    assert r["evidence"]["output_limit"] is True


@pytest.mark.parametrize("language", each(LANGUAGES))
def test_a_pool_entry_runs_it_as_a_cold_sandbox_does(run_language, language, tmp_path):
    # Through a warm entry (`--pooled`: node's loader for JavaScript and TypeScript, an exec
    # entry for the others, after the same compile stage): the same output, exit code, status.
    need(language)
    (tmp_path / "stdin").write_text("a line\n")
    flags = ("--stdin", str(tmp_path / "stdin"))
    cold = run_language(language, ECHO[language], *flags, args=("first",))
    pooled = run_language(language, ECHO[language], "--pooled", *flags, args=("first",))
    assert cold["pooled"] is False and pooled["pooled"] is True
    for key in ("status", "exit_code", "signal", "stdout", "stderr", "truncated"):
        assert pooled[key] == cold[key], (key, cold.describe(), pooled.describe())
    assert pooled.rc == cold.rc == 3
    assert pooled["timing"]["setup_us"] == 0
    if LANGUAGES[language][2]:
        # The compile stage ran in the entry's compile sandbox: made before, no setup now.
        for key in ("status", "exit_code", "stdout", "stderr"):
            assert pooled["compile"][key] == cold["compile"][key], (key, pooled["compile"])
        assert (cold["compile"]["pooled"], pooled["compile"]["pooled"]) == (False, True)
        assert pooled["compile"]["timing"]["setup_us"] == 0 < cold["compile"]["timing"]["setup_us"]


def test_a_pooled_compile_keeps_its_caps_and_takes_the_entry_only_when_it_fits(run_language):
    need("c")
    # The entry's compile sandbox under the request's compile limits: the memory cap holds.
    r = run_language("c", '#include "/dev/zero"\nint main(void) { return 0; }\n', "--pooled",
                     "--compile-memory", "64M")
    r.expect("compile_error", rc=1)
    assert r["compile"]["pooled"] is True, r["compile"]
    assert r["compile"]["status"] == "memory_limit" and r["compile"]["evidence"]["oom_kills"] > 0
    # A compile disk the entry was not made with: a fresh sandbox, same result.
    r = run_language("c", HELLO["c"], "--pooled", "--compile-disk", "100M")
    r.expect("ok", rc=0)
    assert r["compile"]["pooled"] is False and r["compile"]["limits"]["disk_mb"] == 100
    assert r["pooled"] is True and r["stdout"] == "hello\n"


def test_the_compile_sees_the_sandbox_not_the_host(run_language, canary_dir):
    # A compiler reads what its #include names, with the compile sandbox's view of the files:
    # the host's secrets and the canary are not there.
    path, token = canary_dir
    for target in ("/etc/shadow", f"{path}/secret.txt"):
        r = run_language("c", f'#include "{target}"\nint main(void) {{ return 0; }}\n')
        r.expect("compile_error", rc=1)
        assert "No such file or directory" in r["compile"]["stderr"], r["compile"]["stderr"]
        assert token not in r["compile"]["stderr"]


def test_the_artifact_is_read_only_to_the_program(run_language):
    program = """#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
int main(void) {
    int chmodded = chmod("/workspace/main", 0777);
    int chmod_errno = errno;
    int fd = open("/workspace/main", O_WRONLY);
    int open_errno = errno;
    struct stat st;
    stat("/workspace/main", &st);
    printf("chmod=%d/%d open=%d/%d mode=%o uid=%d\\n", chmodded, chmod_errno, fd, open_errno,
           st.st_mode & 07777, (int)st.st_uid);
    return 0;
}
"""
    r = run_language("c", program)
    r.expect("ok")
    # The artifact is a read-only mount of its own: EROFS (a running binary's open for writing
    # may be refused first with ETXTBSY).
    assert re.fullmatch(r"chmod=-1/30 open=-1/(26|30) mode=555 uid=0\n", r["stdout"]), r.describe()


@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "pooled"])
def test_typescripts_artifact_is_read_only_to_the_program_warm_too(run_language, pooled):
    """TypeScript's artifact (main.js) runs in node's loader when pooled: in the program's own
    process, which cannot mount. The entry's init made main.js a read-only mount and left the
    loader a writable fd from before it, which the loader writes the artifact through and closes
    (guest/node_loader.js): the program finds the artifact as a cold run does."""
    program = """import * as fs from "fs";
const outcomes: string[] = [];
const attempt = (f: () => void) => { try { f(); outcomes.push("done"); } catch (e: any) { outcomes.push(e.code); } };
attempt(() => fs.writeFileSync(__filename, "x"));
attempt(() => fs.unlinkSync(__filename));
attempt(() => fs.renameSync(__filename, "moved.js"));
attempt(() => fs.chmodSync(__filename, 0o777));
attempt(() => fs.writeFileSync("scratch", "x"));
const st = fs.statSync(__filename);
console.log(__filename, outcomes.join(" "), (st.mode & 0o7777).toString(8), st.uid,
            fs.readFileSync(__filename, "utf8").includes("outcomes"));
"""
    r = run_language("typescript", program, *(("--pooled",) if pooled else ()))
    r.expect("ok", rc=0)
    assert r["pooled"] == pooled
    assert r["stdout"] == "/workspace/main.js EROFS EBUSY EBUSY EROFS done 444 0 true\n", \
        r.describe()


def test_nodes_own_descriptors_are_left_to_it_warm(run_language):
    """The loader closes fd 5 only when it is init's read-only file (TypeScript's): in a
    JavaScript entry fd 5 was free at node's exec, and node keeps a pipe of its own there, as in a
    cold run."""
    program = """const fs = require("fs");
let kind;
try { const st = fs.fstatSync(5); kind = st.isFIFO() ? "fifo" : st.isFile() ? "file" : "other"; }
catch (e) { kind = e.code; }
console.log(kind);
"""
    cold, pooled = (run_language("javascript", program, *flags) for flags in ((), ("--pooled",)))
    for r in (cold, pooled):
        r.expect("ok", rc=0)
    assert pooled["pooled"] and pooled["stdout"] == cold["stdout"] == "fifo\n", pooled.describe()


def test_every_source_of_the_language_is_compiled_and_other_files_are_there(tmp_path):
    need("c")
    from conftest import run_json
    (tmp_path / "util.c").write_text("int twice(int x) { return 2 * x; }\n")
    (tmp_path / "data.txt").write_text("21\n")
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\nint twice(int);\n'
        'int main(void) { int x; FILE *f = fopen("data.txt", "r"); fscanf(f, "%d", &x);'
        ' printf("%d\\n", twice(x)); return 0; }\n')
    r = run_json(["run", "--json", "--file", str(tmp_path / "util.c"),
                  "--file", str(tmp_path / "data.txt"), str(tmp_path / "main.c")])
    r.expect("ok")
    assert r["stdout"] == "42\n", r.describe()


@pytest.mark.parametrize("pooled", [False, True], ids=["cold", "pooled"])
def test_a_typescript_program_of_several_files_imports_them_as_typescript_does(tmp_path, pooled):
    need("typescript")
    from conftest import run_json
    (tmp_path / "util.ts").write_text(
        "export function twice(x: number): number { return 2 * x; }\n"
        "export const name: string = 'util';\n")
    # ESM style, as TypeScript writes it: "./util.js" for util.ts.
    (tmp_path / "other.ts").write_text(
        "import { twice } from './util.js';\nexport default (): number => twice(2);\n")
    (tmp_path / "unused.ts").write_text("throw new Error('never loaded');\n")
    (tmp_path / "main.ts").write_text(
        "import { twice, name } from './util';\nimport four from './other';\n"
        "const x: number = twice(21);\n"
        "console.log(x, name, four(), require.main === module);\n"
        "require('fs').writeFileSync('/tmp/late.ts', 'console.log(1)');\n"
        "try { require('/tmp/late.ts'); } catch (e) { console.log(String(e)); }\n"
        "function f(): never { throw new Error('boom'); }\nf();\n")
    r = run_json(["run", "--json", *(["--pooled"] if pooled else []),
                  "--file", str(tmp_path / "util.ts"), "--file", str(tmp_path / "other.ts"),
                  "--file", str(tmp_path / "unused.ts"), str(tmp_path / "main.ts")])
    r.expect("exit_nonzero", rc=1)
    assert r["stdout"] == ("42 util 4 true\n"
                           "Error: /tmp/late.ts: not one of the compiled sources\n"), r.describe()
    assert "Error: boom\n    at f (/workspace/main.js:" in r["stderr"], r["stderr"]
    # A source that does not transpile fails the compile, imported or not.
    (tmp_path / "unused.ts").write_text("const x: number = ;\n")
    r = run_json(["run", "--json", "--file", str(tmp_path / "util.ts"),
                  "--file", str(tmp_path / "other.ts"), "--file", str(tmp_path / "unused.ts"),
                  str(tmp_path / "main.ts")])
    r.expect("compile_error", rc=1)
    assert "unused.ts(1,19): error TS1109" in r["compile"]["stderr"], r["compile"]


def test_java_runs_the_entrypoints_public_class_in_its_package(run_language):
    # javac wants a public class in a file of its name; the entrypoint's is run, as java's
    # single-file launcher would, in the file's package.
    r = run_language("java", "package app.x;\nimport java.util.*;\n\n"
                             "public final class Hello {\n  public static void main(String[] a) {"
                             " System.out.println(\"hello \" + Helper.x() + \" \" + a.length); }\n"
                             "}\nclass Helper { static int x() { return 7; } }\n", args=["a", "b"])
    r.expect("ok", rc=0)
    assert r["stdout"] == "hello 7 2\n", r.describe()


def test_a_compile_that_cannot_finish_is_a_compile_error_with_the_caps_status(run_language):
    # The preprocessor reads an endless file: the compile's own wall clock ends it.
    r = run_language("c", '#include "/dev/zero"\nint main(void) { return 0; }\n', timeout=120)
    r.expect("compile_error", rc=1)
    assert r["compile"]["status"] in ("timeout", "memory_limit", "exit_nonzero"), r["compile"]
    assert r["compile"]["status"] != "ok"


def test_the_cli_sets_the_compile_stages_own_limits(run_language):
    # --compile-OPTION: the compile's limits, the run's untouched; a language that does not
    # compile refuses them, as the API's compile_limits is a 400 there.
    r = run_language("c", HELLO["c"], "--compile-memory", "300M", "--compile-pids", "100")
    r.expect("ok", rc=0)
    assert (r["compile"]["limits"]["memory_mb"], r["compile"]["limits"]["pids"]) == (300, 100)
    assert (r["limits"]["memory_mb"], r["limits"]["pids"]) == (256, 64), r.describe()
    # A compile that never ends (the preprocessor reading /dev/zero), under a short deadline and
    # with room enough not to meet its memory cap first.
    r = run_language("c", '#include "/dev/zero"\nint main(void) { return 0; }\n',
                     "--compile-timeout", "200ms", "--compile-memory", "4G")
    r.expect("compile_error", rc=1)
    assert r["compile"]["status"] == "timeout" and r["compile"]["evidence"]["wall_timeout"]
    assert r["compile"]["limits"]["wall_ms"] == 200 and r["limits"]["wall_ms"] == 10000
    from conftest import cli_run
    proc = cli_run(["run", "--compile-memory", "300M", "-c", "print(1)"])
    assert proc.returncode == 64 and b"python has no compile stage" in proc.stderr, proc.stderr


def test_an_artifact_larger_than_the_runs_disk_is_refused(run_language):
    # 80 MiB of initialised data: the compile's disk (256 MiB) holds it, the run's (32 MiB)
    # cannot; the refusal is the compile's verdict, and nothing runs.
    r = run_language("c", "char big[80 << 20] = {1};\n"
                          "int main(void) { return ((volatile char *)big)[1]; }\n",
                     "--disk", "32M")
    r.expect("compile_error", rc=1)
    assert r["compile"]["status"] == "ok", r["compile"]
    assert "does not fit the run's disk (disk_mb 32)" in r["error"], r.describe()
    assert r["usage"]["cpu_ms"] == 0 and r["stdout"] == ""


def test_a_compile_that_fills_its_disk_is_a_compile_error(run_language):
    # 300 MiB of initialised data: the object file alone does not fit the compile's 256 MiB.
    r = run_language("c", "char big[300 << 20] = {1};\n"
                          "int main(void) { return ((volatile char *)big)[1]; }\n")
    r.expect("compile_error", rc=1)
    # The assembler is stopped at the disk's size (RLIMIT_FSIZE, SIGXFSZ) or by ENOSPC; the
    # compiler driver reports it and exits non-zero.
    compile = r["compile"]
    assert compile["status"] in ("disk_full", "exit_nonzero"), compile
    assert ("File size limit exceeded" in compile["stderr"]
            or "No space left on device" in compile["stderr"]), compile["stderr"]


def test_compiler_bombs_end_within_the_compiles_limits(run_language):
    # Template instantiation without end, and a macro that expands to two of itself: the
    # compilers' own depth limits end them, well within the compile's wall clock and memory.
    template_bomb = ("template <int N> struct B { static const int v = B<N + 1>::v + 1; };\n"
                     "int main() { return B<0>::v; }\n")
    r = run_language("cpp", template_bomb)
    r.expect("compile_error", rc=1)
    assert r["compile"]["status"] in ("exit_nonzero", "memory_limit", "timeout"), r["compile"]
    assert r["compile"]["usage"]["wall_ms"] <= 20000 + 1000, r["compile"]["usage"]
    macro_bomb = "macro_rules! m { () => { m!(); m!(); }; }\nm!();\nfn main() {}\n"
    r = run_language("rust", macro_bomb)
    r.expect("compile_error", rc=1)
    assert r["compile"]["status"] in ("exit_nonzero", "memory_limit", "timeout"), r["compile"]


def test_the_compile_stage_has_no_network_and_no_stdin(run_language, tmp_path):
    # The compile's sandbox is a cold one: its own network namespace with only loopback, and
    # nothing on stdin (the run's stdin is the run's). "/dev/stdin" reads as empty.
    program = '#include "/dev/stdin"\n#include <stdio.h>\nint main(void) { char b[8] = "";' \
              ' fgets(b, 8, stdin); printf("run got %s", b); return 0; }\n'
    (tmp_path / "in").write_text("secret\n")
    r = run_language("c", program, "--stdin", str(tmp_path / "in"))
    r.expect("ok")
    assert r["stdout"] == "run got secret\n", r.describe()


def test_aliases_and_extensions_name_the_languages(tmp_path):
    need("javascript")
    from conftest import run_json
    for alias in ("js", "node", "nodejs"):
        r = run_json(["run", "--json", "--lang", alias, "-c", 'console.log("hi")'])
        r.expect("ok")
        assert r["stdout"] == "hi\n"
    for name in ("prog.mjs", "prog.cjs"):
        (tmp_path / name).write_text('console.log("from " + "file")\n')
        r = run_json(["run", "--json", str(tmp_path / name)])
        r.expect("ok")
        assert r["stdout"] == "from file\n"


# --- over HTTP ----------------------------------------------------------------------------------


def test_the_service_compiles_runs_and_charges_the_compile(tmp_path):
    need("c")
    need("cpp")
    from serve_helpers import FREE_TIER, audit_rows, kept_data_dir, running_server
    # A budget a C++ compile spends alone (a few hundred ms of CPU) while its run uses ~1 ms.
    tiers = {"compilers": {**FREE_TIER, "languages": "c, cpp"},
             "metered": {**FREE_TIER, "languages": "cpp", "cpu_budget_ms": 100,
                         "cpu_window_s": 3600}}
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants={"acme": "compilers", "skint": "metered"},
                            data_dir=data_dir) as srv:
            ok = srv.run('#include <stdio.h>\nint main(int c, char **v) { printf("%s\\n", v[1]);'
                         ' return 0; }\n', "c", args=["arg"])
            assert ok["status"] == "ok" and ok["stdout"] == "arg\n", ok
            assert ok["compile"]["status"] == "ok" and ok["compile"]["cached"] is False
            assert ok["compile"]["limits"]["memory_mb"] >= 512, ok["compile"]["limits"]
            assert ok["compile"]["usage"]["cpu_ms"] > 0, ok["compile"]

            # An alias names the language; the audit record says its own name.
            bad = srv.run("int main() { return nope; }", "c++")
            assert bad["status"] == "compile_error" and bad["exit_code"] is None, bad
            assert "nope" in bad["compile"]["stderr"] and bad["stdout"] == "", bad
            assert bad["error"].startswith("the compile ended exit_nonzero"), bad
            record = srv.get_execution(bad["id"]).json()
            assert record["status"] == "compile_error" and record["language"] == "cpp", record

            # The compile's CPU is charged to the tenant: the first program's compile spends
            # the budget, so the second is refused, though the first program ran for ~1 ms.
            program = "#include <iostream>\nint main() { std::cout << 1 << std::endl; }\n"
            first = srv.run(program, "cpp", tenant="skint")
            assert first["status"] == "ok", first
            assert first["usage"]["cpu_ms"] < 100 <= first["compile"]["usage"]["cpu_ms"], first
            second = srv.post_execution({"language": "cpp", "code": program}, tenant="skint")
            assert second.status_code == 429, second.text
        row = audit_rows(data_dir)[bad["id"]]
        assert row["status"] == "compile_error" and row["language"] == "cpp", row


# --- the compile cache ----------------------------------------------------------------------------

def c_program(word):
    return f'#include <stdio.h>\nint main(void) {{ puts("{word}"); return 0; }}\n'


def cache_entries(data_dir):
    root = os.path.join(data_dir, "compile-cache")
    found = []
    for shard in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if os.path.isdir(os.path.join(root, shard)):
            found += [os.path.join(root, shard, name)
                      for name in sorted(os.listdir(os.path.join(root, shard)))]
    return found


def test_a_second_run_of_the_same_sources_is_served_from_the_cache_per_tenant():
    need("c")
    from serve_helpers import FREE_TIER, kept_data_dir, running_server, sample
    tiers = {"compilers": {**FREE_TIER, "languages": "c"}}
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants={"acme": "compilers", "globex": "compilers"},
                            data_dir=data_dir) as srv:
            first = srv.run(c_program("first"), "c")
            second = srv.run(c_program("first"), "c")
            assert first["compile"]["cached"] is False and second["compile"]["cached"] is True
            assert second["status"] == "ok" and second["stdout"] == first["stdout"] == "first\n"
            # A hit runs no compile sandbox: no CPU, no wall time of its own to speak of.
            assert second["compile"]["usage"]["cpu_ms"] == 0, second["compile"]
            assert second["compile"]["timing"]["setup_us"] == 0, second["compile"]
            # Another tenant's identical sources are compiled for it: never shared.
            other = srv.run(c_program("first"), "c", tenant="globex")
            assert other["compile"]["cached"] is False, other["compile"]
            # Any change of a source is a miss.
            changed = srv.run(c_program("first") + "\n", "c")
            assert changed["compile"]["cached"] is False
            metrics = srv.metrics()
            assert sample(metrics, "sandboxd_compile_cache_lookups_total", result="hit") == 1
            assert sample(metrics, "sandboxd_compile_cache_lookups_total", result="miss") == 3
            assert sample(metrics, "sandboxd_compile_cache_entries") == 3
            assert sample(metrics, "sandboxd_compile_cache_bytes") > 3 * 4096
        entries = cache_entries(data_dir)
        assert len(entries) == 3 and not any("/.tmp" in e for e in entries), entries
        assert all(os.stat(e).st_mode & 0o777 == 0o600 for e in entries)
        assert os.stat(os.path.join(data_dir, "compile-cache")).st_mode & 0o777 == 0o700


def test_a_damaged_entry_is_never_run_and_is_compiled_again():
    need("c")
    from serve_helpers import FREE_TIER, kept_data_dir, running_server
    tiers = {"compilers": {**FREE_TIER, "languages": "c"}}
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants={"acme": "compilers"}, data_dir=data_dir) as srv:
            assert srv.run(c_program("whole"), "c")["compile"]["cached"] is False
            [entry] = cache_entries(data_dir)
            # Another program's bytes under this key (a disk error, a poisoning attempt): the
            # entry's own hash no longer matches, so it is dropped and the compile runs.
            with open(entry, "r+b") as f:
                f.seek(-64, os.SEEK_END)
                f.write(b"\xcc" * 16)
            again = srv.run(c_program("whole"), "c")
            assert again["compile"]["cached"] is False, again["compile"]
            assert again["status"] == "ok" and again["stdout"] == "whole\n", again
            third = srv.run(c_program("whole"), "c")
            assert third["compile"]["cached"] is True and third["stdout"] == "whole\n"


def test_the_cache_stays_within_its_bound_evicting_the_least_recently_used():
    need("c")
    from serve_helpers import FREE_TIER, kept_data_dir, running_server, sample
    tiers = {"compilers": {**FREE_TIER, "languages": "c"}}
    with kept_data_dir() as data_dir:
        # Room for two hello-world binaries (~16 KB each), not three.
        with running_server(tiers=tiers, tenants={"acme": "compilers"}, data_dir=data_dir,
                            server={"compile_cache_bytes": 40000}) as srv:
            for word in ("a", "b"):
                assert srv.run(c_program(word), "c")["compile"]["cached"] is False
            time.sleep(0.05)
            assert srv.run(c_program("a"), "c")["compile"]["cached"] is True  # a is used last
            time.sleep(0.05)
            assert srv.run(c_program("c"), "c")["compile"]["cached"] is False  # evicts b
            assert srv.run(c_program("a"), "c")["compile"]["cached"] is True
            assert srv.run(c_program("b"), "c")["compile"]["cached"] is False
            metrics = srv.metrics()
            assert sample(metrics, "sandboxd_compile_cache_evictions_total") >= 2
            assert sample(metrics, "sandboxd_compile_cache_bytes") <= 40000
            assert sample(metrics, "sandboxd_compile_cache_entries") == 2


def test_files_may_come_base64_encoded_binaries_included():
    need("c")
    import base64
    from serve_helpers import FREE_TIER, expect_json, expect_problem, running_server
    payload = bytes(range(256)) * 3
    with running_server(tiers={"t": {**FREE_TIER, "languages": "python, sh"}},
                        tenants={"acme": "t"}) as srv:
        result = expect_json(srv.post_execution({"language": "python", "files": [
            {"path": "main.py", "content": "import hashlib, sys\n"
                                           "print(hashlib.sha256(open('blob', 'rb').read())"
                                           ".hexdigest())\n"},
            {"path": "blob", "content": base64.b64encode(payload).decode(),
             "encoding": "base64"}], "entrypoint": "main.py"}))
        import hashlib
        assert result["status"] == "ok" and \
            result["stdout"] == hashlib.sha256(payload).hexdigest() + "\n", result
        for bad in ("abc", "ab=c", "a===", "ab!d", "YQ=", "YQ==YQ=="):
            r = srv.post_execution({"language": "python", "entrypoint": "main.py", "files": [
                {"path": "main.py", "content": bad, "encoding": "base64"}]})
            expect_problem(r, 400, field="files[0].content")
        r = srv.post_execution({"language": "python", "entrypoint": "main.py", "files": [
            {"path": "main.py", "content": "print(1)", "encoding": "hex"}]})
        expect_problem(r, 400, field="files[0].encoding")
        # Empty is base64 of nothing: a 0-byte file.
        ok = expect_json(srv.post_execution({"language": "python", "files": [
            {"path": "main.py", "content": base64.b64encode(b"print(len(open('e').read()))").decode(),
             "encoding": "base64"},
            {"path": "e", "content": "", "encoding": "base64"}], "entrypoint": "main.py"}))
        assert ok["stdout"] == "0\n", ok


def test_the_service_serves_any_language_from_a_warm_exec_entry():
    need("c")
    from serve_helpers import FREE_TIER, running_server, sample
    pools = {"python": {"min_idle": 0}, "bash": {"min_idle": 1, "max_idle": 1},
             "c": {"min_idle": 1, "max_idle": 1}}
    with running_server(tiers={"t": {**FREE_TIER, "languages": "python, bash, c"}},
                        tenants={"acme": "t"}, pools=pools) as srv:
        deadline = time.monotonic() + 30
        while sample(srv.metrics(), "sandboxd_pool_entries", state="idle") < 2:
            assert time.monotonic() < deadline, "the pools never filled"
            time.sleep(0.05)
        shell = srv.run('echo "$0 $1"; read -r x; echo "$x"', "bash", args=["arg"], stdin="in\n")
        assert shell["pooled"] is True and shell["status"] == "ok", shell
        assert shell["stdout"] == "/workspace/main.sh arg\nin\n", shell
        assert shell["timing"]["setup_us"] == 0
        compiled = srv.run(c_program("pooled"), "c")
        assert compiled["pooled"] is True and compiled["stdout"] == "pooled\n", compiled
        # ... its compile stage in the entry's compile sandbox.
        assert compiled["compile"]["status"] == "ok" and compiled["compile"]["pooled"] is True
        assert compiled["compile"]["timing"]["setup_us"] == 0, compiled["compile"]
        deadline = time.monotonic() + 30
        while sample(srv.metrics(), "sandboxd_pool_entries", state="idle") < 2:
            assert time.monotonic() < deadline, "the pools never refilled"
            time.sleep(0.05)
        # The compile cache serves the pooled path too.
        again = srv.run(c_program("pooled"), "c")
        assert again["pooled"] is True and again["compile"]["cached"] is True, again
        assert again["compile"]["pooled"] is False  # no compile ran
        # The pools refill behind the executions they served.
        metrics = srv.metrics()
        assert sample(metrics, "sandboxd_pool_hits_total") == 3, metrics
        # python has no pool here: it runs cold.
        assert srv.run("print(1)", "python")["pooled"] is False


def test_compile_limits_are_the_requests_within_the_tiers_compile_ceilings():
    need("cpp")
    from serve_helpers import FREE_TIER, expect_json, expect_problem, running_server
    tiers = {"t": {**FREE_TIER, "languages": "python, c, cpp", "max_compile_memory_mb": 300,
                   "max_compile_wall_ms": 20000}}
    with running_server(tiers=tiers, tenants={"acme": "t"}) as srv:
        program = "#include <iostream>\nint main() { std::cout << 1 << std::endl; }\n"
        # Within the ceiling: the compile gets what it asked, and a compiler that needs more
        # memory than that is stopped by the compile's own cap, with the kernel's evidence.
        starved = expect_json(srv.post_execution(
            {"language": "cpp", "code": program, "compile_limits": {"memory_mb": 16}}))
        assert starved["status"] == "compile_error", starved
        assert starved["compile"]["limits"]["memory_mb"] == 16
        assert starved["compile"]["status"] == "memory_limit", starved["compile"]
        assert starved["compile"]["evidence"]["oom_kills"] > 0
        assert starved["clamped"] == []
        # Above it: lowered to it, and said.
        big = expect_json(srv.post_execution(
            {"language": "cpp", "code": program,
             "compile_limits": {"memory_mb": 4096, "wall_ms": 15000}}))
        assert big["status"] == "ok" and big["stdout"] == "1\n", big
        assert big["compile"]["limits"]["memory_mb"] == 300
        assert big["compile"]["limits"]["wall_ms"] == 15000
        assert big["clamped"] == ["compile_limits.memory_mb"], big["clamped"]
        # The default for cpp (1 GiB) is above this tier's ceiling: lowered silently.
        default = srv.run(program, "cpp")
        assert default["compile"]["limits"]["memory_mb"] == 300 and default["clamped"] == []
        # The compile's deadline is its own.
        slow = expect_json(srv.post_execution(
            {"language": "cpp", "code": program + "#include <regex>\n",
             "compile_limits": {"wall_ms": 50}}))
        assert slow["status"] == "compile_error", slow
        assert slow["compile"]["status"] == "timeout", slow["compile"]
        # A language without a compile stage, and a bad value, are refused.
        expect_problem(srv.post_execution({"language": "python", "code": "1",
                                           "compile_limits": {"memory_mb": 64}}),
                       400, field="compile_limits")
        expect_problem(srv.post_execution({"language": "c", "code": "int main(){}",
                                           "compile_limits": {"memory_mb": 0}}),
                       400, field="compile_limits.memory_mb")
        expect_problem(srv.post_execution({"language": "c", "code": "int main(){}",
                                           "compile_limits": {"nope": 1}}),
                       400, field="compile_limits.nope")


def test_the_cache_cannot_be_redirected_through_the_api_uids_data_dir(tmp_path):
    # The data directory is the unprivileged API process's: it could swap compile-cache for a
    # link. The engine holds the directory it opened at start and works below it only.
    need("c")
    from serve_helpers import FREE_TIER, kept_data_dir, running_server
    target = tmp_path / "elsewhere"
    target.mkdir()
    tiers = {"compilers": {**FREE_TIER, "languages": "c"}}
    with kept_data_dir() as data_dir:
        cache = os.path.join(data_dir, "compile-cache")
        with running_server(tiers=tiers, tenants={"acme": "compilers"}, data_dir=data_dir) as srv:
            assert srv.run(c_program("one"), "c")["status"] == "ok"
            os.rename(cache, cache + ".moved")
            os.symlink(target, cache)
            assert srv.run(c_program("two"), "c")["compile"]["cached"] is False
            assert srv.run(c_program("two"), "c")["compile"]["cached"] is True
        assert list(target.iterdir()) == [], list(target.iterdir())
        assert len([e for e in os.listdir(cache + ".moved") if len(e) == 2]) >= 1
        # A link there at start (left by the swap above), then a directory the API uid made
        # with an entry planted for a predictable key: each is moved aside and a fresh cache
        # made; nothing planted is ever used.
        for planted in ("link", "directory"):
            if planted == "directory":
                os.rename(cache, cache + ".old")
                os.makedirs(os.path.join(cache, "ab"))
                with open(os.path.join(cache, "ab", "ab" * 32), "wb") as f:
                    f.write(b"SBXCACHE1\n" + bytes(40))
                os.chown(cache, 1999999999, 1999999999)
            assert os.path.islink(cache) == (planted == "link")
            with running_server(tiers=tiers, tenants={"acme": "compilers"},
                                data_dir=data_dir) as srv:
                first = srv.run(c_program(planted), "c")
                assert first["status"] == "ok" and first["compile"]["cached"] is False
                assert srv.run(c_program(planted), "c")["compile"]["cached"] is True, \
                    srv.stderr()[-2000:]
                assert "was not made by sandboxd" in srv.stderr(), planted
            st = os.lstat(cache)
            assert not os.path.islink(cache) and st.st_uid == 0 and st.st_mode & 0o777 == 0o700
            assert not os.path.exists(os.path.join(cache, "ab", "ab" * 32))
        assert list(target.iterdir()) == []


def test_the_cache_key_holds_the_entrypoint_and_sources_are_never_options():
    need("typescript")
    need("c")
    from serve_helpers import FREE_TIER, running_server
    with running_server(tiers={"t": {**FREE_TIER, "languages": "c, typescript"}},
                        tenants={"acme": "t"}) as srv:
        files = [{"path": "a.ts", "content": "console.log('A');\n"},
                 {"path": "b.ts", "content": "console.log('B');\n"}]
        a = srv.run(None, "typescript", files=files, entrypoint="a.ts")
        b = srv.run(None, "typescript", files=files, entrypoint="b.ts")
        assert (a["stdout"], b["stdout"]) == ("A\n", "B\n"), (a, b)
        assert b["compile"]["cached"] is False  # the same files, another entrypoint
        assert srv.run(None, "typescript", files=files,
                       entrypoint="b.ts")["compile"]["cached"] is True
        # A source whose name reads like an option is compiled as a file.
        c = srv.run(None, "c", entrypoint="main.c", files=[
            {"path": "main.c", "content": '#include <stdio.h>\nint other(void);\n'
                                          'int main(void) { printf("%d\\n", other() + 2); }\n'},
            {"path": "-DVALUE=2.c", "content": "int other(void) { return 40; }\n"}])
        assert c["status"] == "ok" and c["stdout"] == "42\n", c
