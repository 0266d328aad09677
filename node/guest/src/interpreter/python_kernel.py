"""warren's Python kernel: one persistent namespace, driven by the guest agent.

Requests arrive as JSON lines on fd 3 ({"seq": N, "code": "..."}); events leave as JSON
lines on fd 4: stdout, stderr, result, error, and {"type": "done", "seq": N} at the end of
each run. fd 1 and 2 stay pipes that the guest reads too, so output of subprocesses and of
C code reaches the client. SIGINT interrupts a run (KeyboardInterrupt).
"""

import ast
import base64
import builtins
import importlib.abc
import importlib.util
import io
import json
import linecache
import os
import sys
import signal
import threading
import time
import traceback
import types

_KERNEL_FILE = __file__ if "__file__" in globals() else "<kernel>"
_events = os.fdopen(4, "wb", buffering=0)
_events_lock = threading.Lock()


def _emit(event):
    line = (json.dumps(event, default=str) + "\n").encode("utf-8", "surrogatepass")
    with _events_lock:
        _events.write(line)


class _Stream(io.TextIOBase):
    """sys.stdout/sys.stderr: whole lines go out at once, a partial line within 50 ms."""

    def __init__(self, name, fd):
        self._name = name
        self._fd = fd
        self._buf = []
        self._lock = threading.Lock()

    @property
    def encoding(self):
        return "utf-8"

    @property
    def name(self):
        return "<" + self._name + ">"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not " + type(s).__name__)
        if not s:
            return 0
        with self._lock:
            self._buf.append(s)
            pending = "".join(self._buf) if ("\n" in s or sum(map(len, self._buf)) > 8192) else None
            if pending is not None:
                self._buf = []
        if pending is not None:
            _emit({"type": self._name, "text": pending})
        else:
            _flush_soon.set()
        return len(s)

    def flush(self):
        with self._lock:
            pending = "".join(self._buf)
            self._buf = []
        if pending:
            _emit({"type": self._name, "text": pending})


_stdout = _Stream("stdout", 1)
_stderr = _Stream("stderr", 2)
_flush_soon = threading.Event()


def _flusher():
    while True:
        _flush_soon.wait()
        _flush_soon.clear()
        time.sleep(0.05)
        _stdout.flush()
        _stderr.flush()


threading.Thread(target=_flusher, name="warren-flush", daemon=True).start()

# --- rich results -----------------------------------------------------------------------

_REPR_METHODS = [
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_svg_", "svg"),
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
]


def _format(obj):
    """The result fields of a value: every rich representation it offers, plus text."""
    out = {}
    if not isinstance(obj, type):
        for method, key in _REPR_METHODS:
            fn = getattr(obj, method, None)
            if not callable(fn):
                continue
            try:
                value = fn()
            except Exception:
                continue
            if isinstance(value, tuple) and value:
                value = value[0]
            if value is None:
                continue
            if key in ("png", "jpeg"):
                if isinstance(value, str):
                    value = value.encode("latin-1")
                value = base64.b64encode(value).decode("ascii")
            elif isinstance(value, bytes) and key != "json":
                value = value.decode("utf-8", "replace")
            out[key] = value
    if "json" not in out and type(obj) in (dict, list):
        try:
            out["json"] = json.loads(json.dumps(obj, allow_nan=False))
        except (TypeError, ValueError):
            pass
    try:
        out["text"] = repr(obj)
    except Exception as e:
        out["text"] = "<unrepresentable %s: %s>" % (type(obj).__name__, e)
    return out


def _is_figure(obj):
    mpl_figure = sys.modules.get("matplotlib.figure")
    return mpl_figure is not None and isinstance(obj, mpl_figure.Figure)


def display(*objs):
    """Shows each object as a result now (as IPython's display())."""
    for obj in objs:
        if _is_figure(obj):
            _emit_figure(obj)
        else:
            _stdout.flush()
            _emit(dict(_format(obj), type="result"))


def _emit_figure(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    _stdout.flush()
    _emit({"type": "result", "png": base64.b64encode(buf.getvalue()).decode("ascii"),
           "text": repr(fig)})


def _flush_figures():
    """Every open matplotlib figure becomes a png result and is closed (as Jupyter's inline
    backend), when pyplot has been imported at all."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for num in plt.get_fignums():
            _emit_figure(plt.figure(num))
    finally:
        plt.close("all")


# A matplotlib backend whose show() flushes figures instead of warning. It is made the
# default when matplotlib is imported while the environment asks for Agg (or nothing), and
# only inside this process: subprocesses still see MPLBACKEND as it was.
_INLINE_BACKEND = "warren_inline_backend"


class _InlineBackendLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        module.FigureCanvas = FigureCanvasAgg
        module.show = lambda *args, **kwargs: _flush_figures()


class _MatplotlibHook(importlib.abc.MetaPathFinder):
    def __init__(self):
        self._patched = False

    def find_spec(self, name, path, target=None):
        if name == _INLINE_BACKEND:
            return importlib.util.spec_from_loader(name, _InlineBackendLoader())
        if name != "matplotlib" or self._patched:
            return None
        self._patched = True
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            if os.environ.get("MPLBACKEND", "").lower() in ("", "agg"):
                module.rcParams["backend"] = "module://" + _INLINE_BACKEND

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _MatplotlibHook())

# --- running code -----------------------------------------------------------------------

# User code runs in a fresh __main__ module (so that pickle finds its classes).
_main = types.ModuleType("__main__")
_main.__dict__.update({"__builtins__": builtins, "display": display})
sys.modules["__main__"] = _main
_namespace = _main.__dict__
_loop = None
_running = False


def _on_sigint(signum, frame):
    # Between runs an interrupt that arrived late is ignored.
    if _running:
        raise KeyboardInterrupt


def _user_traceback(exc):
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(type(exc), exc))
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _KERNEL_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _report(exc):
    _stdout.flush()
    _stderr.flush()
    _emit({
        "type": "error",
        "name": type(exc).__name__,
        "message": str(exc),
        "traceback": _user_traceback(exc),
    })


def _run_code(code):
    result = eval(code, _namespace)
    if code.co_flags & 0x80:  # CO_COROUTINE: the cell awaited at top level
        global _loop
        import asyncio

        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
        result = _loop.run_until_complete(result)
    return result


def _run(code, filename):
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    if tree.body:
        _run_code(compile(tree, filename, "exec", flags=flags))
    if last is not None:
        value = _run_code(compile(last, filename, "eval", flags=flags))
        if value is not None and not _is_figure(value):
            _namespace["_"] = value
            _stdout.flush()
            _emit(dict(_format(value), type="result"))


def main():
    requests = os.fdopen(3, "rb")
    sys.stdin = open(os.devnull)
    sys.stdout = _stdout
    sys.stderr = _stderr
    signal.signal(signal.SIGINT, _on_sigint)
    global _running
    _emit({"type": "ready", "pid": os.getpid()})
    for raw in requests:
        try:
            req = json.loads(raw)
        except ValueError:
            continue
        seq = req.get("seq", 0)
        filename = "<cell-%s>" % seq
        code = req.get("code", "")
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        _running = True
        try:
            _run(code, filename)
        except BaseException as exc:  # noqa: B036 - KeyboardInterrupt and SystemExit too
            try:
                _report(exc)
            except KeyboardInterrupt:
                _report(exc)
        finally:
            try:
                _flush_figures()
            except BaseException as exc:  # noqa: B036
                _report(exc)
            _running = False
            _stdout.flush()
            _stderr.flush()
            _emit({"type": "done", "seq": seq})


main()
