#!/usr/bin/env python3
"""doc_commands.py FILE.md — prints a bash script that runs the FILE's ```sh blocks as a reader would paste them,
scaled down so the whole of them runs in seconds (tests/e2e/readme.sh runs it; docs must run as written).

Blocks run in document order, in one shell (a later block may use an earlier one's variables, files and servers).
A block may be marked on the line just before its fence:
  <!-- test: skip: REASON -->   not run (it needs what a test machine lacks: GPUs, other hosts, `make test` itself)
  <!-- test: later -->          run after the file's other blocks (it uses what a later section sets up)
What the runner changes, and only this:
  --range A:B        at most 4 examples: --range A:min(B, A+4)
  train-router       --epochs 2 added
  [--flag ...]       optional parts (square brackets starting with a dash) left out
  MODEL.gguf         ../shared/models/stories260K.gguf
  --shape NAME       --shape tiny (synth writes a small file)
  /tmp/...           the test's own folder ($T/...); port 8080 a free port ($PORT)
  make ...           not run (make builds into build/, which tests never touch; `make demo`'s script runs apart)
  a server started in the foreground (build/tokroute ui|serve without a trailing &) runs in the background on a
  free port until it answers GET /, then is stopped.
"""
import re
import sys


def blocks(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            mark = lines[i - 1].strip() if i > 0 else ""
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            yield start + 1, mark, lines[start:j]
            i = j
        i += 1


def logical(lines):
    """Joins continuation lines (trailing backslash) into one command."""
    out, cur = [], ""
    for line in lines:
        if line.rstrip().endswith("\\") and not line.lstrip().startswith("#"):
            cur += line.rstrip()[:-1] + " "
        else:
            out.append(cur + line)
            cur = ""
    if cur:
        out.append(cur)
    return out


def scale(cmd):
    if cmd.lstrip().startswith("#"):
        return cmd
    if re.match(r"\s*make\b", cmd):
        return "# (not run) " + cmd
    cmd = re.sub(r"\[-[^\]]*\]", "", cmd)
    cmd = re.sub(r"--range (\d+):(\d+)", lambda m: "--range %s:%d" % (m[1], min(int(m[2]), int(m[1]) + 4)), cmd)
    cmd = re.sub(r"\btrain-router ", "train-router --epochs 2 ", cmd)
    cmd = cmd.replace("MODEL.gguf", "../shared/models/stories260K.gguf")
    cmd = re.sub(r"--shape \S+", "--shape tiny", cmd)
    cmd = re.sub(r"/tmp/", "$T/", cmd)
    cmd = cmd.replace(":8080", ":$PORT").replace("--port 8080", "--port $PORT")
    code = cmd.split(" #")[0].rstrip()
    server = re.match(r"\s*build/tokroute (ui|serve) ", code)
    if server and not code.endswith("&"):
        code = re.sub(r"--port \S+", "", code)
        return (f'{code} --port 0 --ready-file "$T/fg.ready" & fg=$!\n'
                f'until [ -s "$T/fg.ready" ]; do kill -0 $fg; sleep 0.1; done\n'
                f'curl -sSf "$(cat "$T/fg.ready")/{"" if server[1] == "ui" else "health"}" >/dev/null\n'
                f'kill $fg; wait $fg || true; rm -f "$T/fg.ready"')
    return cmd


def main():
    path = sys.argv[1]
    now, later = [], []
    for line, mark, body in blocks(path):
        if mark.startswith("<!-- test: skip"):
            continue
        text = "\n".join(scale(c) for c in logical(body))
        (later if mark == "<!-- test: later -->" else now).append(f'BLOCK="{path}:{line}"\n{text}\n')
    print("\n".join(now + later))


if __name__ == "__main__":
    main()
