// The warm-pool loader for JavaScript and TypeScript (DESIGN.md "Warm pools"): sandboxd starts
// it, fully sandboxed (every isolation layer is already in force), as `node <this file>` in a
// pool entry, the file written into /workspace by the sandbox's init and removed here at once
// (not `node -e`: that puts require, module and every built-in module on the global object,
// where a program would find them; and a .cjs, whose format no package.json decides: node
// caches the package.json lookups it makes, and one made for the loader before the program's
// files exist would hide the program's own "type": "module"). It pays node's start-up while no client waits, says "R" on
// fd 3, the agent channel (a socket), and blocks there for one execution (format:
// src/sandbox/agent.h):
//
//   u32 (little-endian) header length, then the header: NUL-terminated fields
//     count, argv..., count, "NAME=value"..., count, (path, size, flags)..., main path
//   then each file's bytes in order. argv[0] is node itself; flags hold "x" when the file is
//   executable, "r" when it is read-only (TypeScript's artifact).
//
// It writes the files into /workspace, closes fd 3 and runs the program as `node main.js` would:
// Node's own entry point (Module.runMain) loads it as the main module (CommonJS, or an ES module
// for .mjs), with process.argv, the request's environment, its exit code, uncaught exceptions,
// unhandled rejections and pending timers handled by node as usual. Only node's own stack frames
// below the program's differ from a cold run's. One execution per loader: the sandbox is
// destroyed afterwards, never reused.
//
// A read-only file is a read-only mount the entry's init made at its path (the loader cannot
// mount, and the program, which runs in this process, must not be able to write it): init left
// fd 5 open on it, writable, from before the mount. The loader writes the file through fd 5 and
// closes it before the program runs, as it does without such a file: nothing writable of it is
// left. A read-only file with no such fd, or at another path, fails the execution.
'use strict';

const fs = require('fs');
const path = require('path');
const Module = require('module');

fs.unlinkSync(__filename);
delete require.cache[__filename];

const AGENT_FD = 3;
const READ_ONLY_FILE_FD = 5; // sandbox/native/launch_internal.h's PROGRAM_LOADER_WRITE_FD

function readExactly(size) {
  const buffer = Buffer.alloc(size);
  let got = 0;
  while (got < size) {
    let n;
    try {
      n = fs.readSync(AGENT_FD, buffer, got, size - got, null);
    } catch (error) {
      if (error.code === 'EAGAIN' || error.code === 'EINTR') continue;
      throw error;
    }
    if (n === 0) process.exit(0); // retired unused: the supervisor hung up
    got += n;
  }
  return buffer;
}

// Writes a read-only file through the fd init left to it (see above), once sure it is the file
// at target.
function writeReadOnly(target, data, executable) {
  const held = fs.fstatSync(READ_ONLY_FILE_FD);
  const there = fs.statSync(target);
  if (held.dev !== there.dev || held.ino !== there.ino || held.size !== 0) {
    throw new Error(`${target}: not this entry's read-only file`);
  }
  for (let done = 0; done < data.length;) {
    done += fs.writeSync(READ_ONLY_FILE_FD, data, done, data.length - done);
  }
  fs.fchmodSync(READ_ONLY_FILE_FD, executable ? 0o555 : 0o444);
}

// Closes fd 5 when it is init's read-only file, written or not. Without one (an entry of a language
// that compiles nothing), fd 5 was free at the exec and node may hold one of its own pipes there:
// init's is the only regular file it can be.
function closeReadOnlyFile() {
  let held;
  try {
    held = fs.fstatSync(READ_ONLY_FILE_FD);
  } catch (error) {
    if (error.code === 'EBADF') return;
    throw error;
  }
  if (held.isFile()) fs.closeSync(READ_ONLY_FILE_FD);
}

function receive() {
  const length = readExactly(4).readUInt32LE(0);
  const fields = readExactly(length).toString('utf8').split('\0');
  let next = 0;
  const items = () => {
    const count = Number(fields[next++]);
    const list = fields.slice(next, next + count);
    next += count;
    return list;
  };
  const argv = items();
  const env = items();
  const files = [];
  const fileCount = Number(fields[next++]);
  for (let i = 0; i < fileCount; i++) {
    files.push({path: fields[next], size: Number(fields[next + 1]),
                executable: fields[next + 2].includes('x'),
                readOnly: fields[next + 2].includes('r')});
    next += 3;
  }
  const main = fields[next];
  for (const file of files) {
    const data = readExactly(file.size);
    const target = path.join('/workspace', file.path);
    if (file.readOnly) {
      writeReadOnly(target, data, file.executable);
      continue;
    }
    fs.mkdirSync(path.dirname(target), {recursive: true});
    fs.writeFileSync(target, data, {mode: file.executable ? 0o755 : 0o644, flag: 'wx'});
  }
  fs.closeSync(AGENT_FD);
  closeReadOnlyFile();
  return {argv, env, main};
}

fs.writeSync(AGENT_FD, 'R');
const execution = receive();
for (const name of Object.keys(process.env)) delete process.env[name];
for (const entry of execution.env) {
  const equals = entry.indexOf('=');
  process.env[entry.slice(0, equals)] = entry.slice(equals + 1);
}
process.argv = execution.argv;
// Not from this script's frame: the program's uncaught error then ends its stack as a cold run's
// does, and node's own loop runs what the program leaves pending.
setImmediate(() => Module.runMain(execution.main));
