#!/usr/bin/python3
"""Drives one page in headless Chromium through its DevTools protocol (over a pipe: no port, no
WebSocket library) and reports what happened, as JSON on standard output. The standard library
only; RLTest::Browser runs it.

    cdp_page.py [--chromium PATH] [--timeout SECONDS] STEPS.json

STEPS.json is a list of steps, run in order; the first that fails stops the run:
    {"viewport": [width, height]}        the window's size (CSS pixels) from now on
    {"dialogs": "accept" | "dismiss"}    how confirm() and alert() are answered (dismiss)
    {"goto": URL}                        loads URL, waits for its load event
    {"wait": EXPR, "timeout": S, "as": NAME}   evaluates EXPR until it is truthy (S: 10 s)
    {"eval": EXPR, "as": NAME}           evaluates EXPR once
    {"click": SELECTOR}                  element.click() on the first match (fails if none)
    {"screenshot": PATH}                 a PNG of the page as it is

The report: {"ok", "failed" (the step), "error", "values" {NAME: value}, "console" [{type, text}],
"exceptions" [text], "log" [{level, source, text, url}] (CSP violations land here),
"requests" [{method, url}] (every request the page made), "responses" [{url, status}],
"failed_requests" [{url, error}], "dialogs" [{type, message}]}.
"""
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
    "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--no-default-browser-check",
    "--remote-debugging-pipe",
]


class Browser:
    def __init__(self, chromium, deadline):
        self.deadline = deadline
        self.profile = tempfile.mkdtemp(prefix="rl-chromium-")
        cmd_r, self.cmd_w = os.pipe()   # we write commands, Chromium reads fd 3
        self.evt_r, evt_w = os.pipe()   # Chromium writes fd 4, we read

        def child():
            # Copies first: the pipes may be fds 3 and 4 themselves (dup2 onto itself keeps
            # close-on-exec). pass_fds keeps 3 and 4 open across the exec.
            r, w = os.dup(cmd_r), os.dup(evt_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [chromium] + FLAGS + ["--user-data-dir=" + self.profile, "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child, pass_fds=(3, 4),
        )
        os.close(cmd_r)
        os.close(evt_w)
        self.buf = b""
        self.next_id = 0
        self.session = None
        self.dialogs_accept = False
        self.report = {"console": [], "exceptions": [], "log": [], "requests": [], "responses": [],
                       "failed_requests": [], "dialogs": []}
        self.urls = {}

    def close(self):
        try:
            self.send("Browser.close", session=False, wait=False)
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method, params=None, session=True, wait=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        if not wait:
            return None
        want = self.next_id
        while True:
            m = self.receive(self.deadline - time.time())
            if m.get("id") == want:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"].get("message")))
                return m.get("result", {})

    def receive(self, timeout):
        while b"\0" not in self.buf:
            if timeout <= 0 or not select.select([self.evt_r], [], [], timeout)[0]:
                raise TimeoutError("no answer from Chromium in time")
            chunk = os.read(self.evt_r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium went away")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        m = json.loads(raw)
        if "method" in m:
            self.event(m["method"], m.get("params", {}))
        return m

    def event(self, method, p):
        r = self.report
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            r["console"].append({"type": p.get("type"), "text": text})
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            r["exceptions"].append(d.get("exception", {}).get("description") or d.get("text"))
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            r["log"].append({k: e.get(k) for k in ("level", "source", "text", "url")})
        elif method == "Network.requestWillBeSent":
            req = p.get("request", {})
            self.urls[p.get("requestId")] = req.get("url")
            r["requests"].append({"method": req.get("method"), "url": req.get("url")})
        elif method == "Network.responseReceived":
            resp = p.get("response", {})
            r["responses"].append({"url": resp.get("url"), "status": resp.get("status")})
        elif method == "Network.loadingFailed":
            r["failed_requests"].append({"url": self.urls.get(p.get("requestId")), "error": p.get("errorText"),
                                         "blocked": p.get("blockedReason")})
        elif method == "Page.javascriptDialogOpening":
            r["dialogs"].append({"type": p.get("type"), "message": p.get("message")})
            self.send("Page.handleJavaScriptDialog", {"accept": self.dialogs_accept}, wait=False)

    def attach(self):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(domain + ".enable")

    def evaluate(self, expr):
        res = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise RuntimeError("evaluating %s: %s" % (expr, d.get("exception", {}).get("description") or d.get("text")))
        return res.get("result", {}).get("value")

    def goto(self, url):
        self.send("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete'", 15)

    def wait(self, expr, timeout):
        end = min(time.time() + timeout, self.deadline)
        while True:
            v = self.evaluate(expr)
            if v:
                return v
            if time.time() >= end:
                raise TimeoutError("not true within %ss: %s" % (timeout, expr))
            # let events in while waiting
            try:
                self.receive(0.05)
            except TimeoutError:
                pass


def run(steps, chromium, timeout):
    deadline = time.time() + timeout
    b = Browser(chromium, deadline)
    values = {}
    out = {"ok": True, "failed": None, "error": None, "values": values}
    try:
        b.attach()
        for step in steps:
            try:
                if "viewport" in step:
                    w, h = step["viewport"]
                    b.send("Emulation.setDeviceMetricsOverride",
                           {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": False})
                elif "dialogs" in step:
                    b.dialogs_accept = step["dialogs"] == "accept"
                elif "goto" in step:
                    b.goto(step["goto"])
                elif "wait" in step:
                    v = b.wait(step["wait"], step.get("timeout", 10))
                    if "as" in step:
                        values[step["as"]] = v
                elif "eval" in step:
                    v = b.evaluate(step["eval"])
                    if "as" in step:
                        values[step["as"]] = v
                elif "click" in step:
                    sel = json.dumps(step["click"])
                    if not b.evaluate("(() => { const e = document.querySelector(%s); if (!e) return false; "
                                      "e.click(); return true; })()" % sel):
                        raise RuntimeError("nothing matches " + step["click"])
                elif "screenshot" in step:
                    png = b.send("Page.captureScreenshot", {"format": "png"})["data"]
                    with open(step["screenshot"], "wb") as f:
                        f.write(base64.b64decode(png))
                else:
                    raise RuntimeError("unknown step")
            except Exception as e:  # the step's failure is the report's, not a crash
                out.update(ok=False, failed=step, error="%s: %s" % (type(e).__name__, e))
                break
        # events still on their way (a console message the last step caused)
        try:
            while True:
                b.receive(0.2)
        except (TimeoutError, RuntimeError):
            pass
    except Exception as e:
        out.update(ok=False, error="%s: %s" % (type(e).__name__, e))
    finally:
        b.close()
    out.update(b.report)
    return out


def main():
    args = sys.argv[1:]
    chromium, timeout = "/usr/bin/chromium", 60.0
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--chromium":
            chromium = args.pop(0)
        elif opt == "--timeout":
            timeout = float(args.pop(0))
        else:
            sys.exit("unknown option " + opt)
    if len(args) != 1:
        sys.exit(__doc__)
    with open(args[0]) as f:
        steps = json.load(f)
    json.dump(run(steps, chromium, timeout), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
