"""The code interpreter: contexts, rich results, errors, streaming, languages."""

import time

import pytest

import warren


def test_python_context_keeps_state_and_reports_errors(sb):
    ctx = sb.create_code_context("python")
    assert (ctx.language, ctx.cwd) == ("python", "/workspace") and ctx.id.startswith("ctx-")
    assert sb.run_code("x = 40; y = 2", context=ctx).results == []
    r = sb.run_code("x + y", context=ctx)
    assert r.text == "42" and r.results[0].text == "42" and r.error is None
    r = sb.run_code("{'a': [1, 2], 'b': None}", context=ctx)
    assert r.results[0].json == {"a": [1, 2], "b": None}
    r = sb.run_code("def f():\n    return 1 / 0\nf()", context=ctx.id)
    assert (r.error.name, r.error.message) == ("ZeroDivisionError", "division by zero")
    assert "in f" in r.error.traceback
    assert sb.run_code("print(x)", context=ctx).stdout == "40\n"
    r = sb.run_code("import time\nprint('before')\ntime.sleep(30)", context=ctx, timeout=0.5)
    assert r.error.name == "TimeoutError" and r.stdout == "before\n"
    assert sb.run_code("x", context=ctx).text == "40", "interrupted, not restarted"
    assert ctx.id in [c.id for c in sb.list_code_contexts()]
    sb.delete_code_context(ctx)
    with pytest.raises(warren.ContextNotFoundError):
        sb.run_code("x", context=ctx)


def test_rich_results_and_callbacks(sb):
    ctx = sb.create_code_context()
    got = {"out": [], "res": [], "err": []}
    code = (
        "import matplotlib.pyplot as plt\n"
        "print('plotting')\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "plt.show()\n"
        "class M:\n"
        "    def _repr_markdown_(self): return '**bold**'\n"
        "    def _repr_latex_(self): return r'$x^2$'\n"
        "    def _repr_svg_(self): return '<svg xmlns=\"http://www.w3.org/2000/svg\"/>'\n"
        "M()"
    )
    r = sb.run_code(code, context=ctx, on_stdout=got["out"].append, on_result=got["res"].append, on_error=got["err"].append)
    assert r.error is None and got["err"] == []
    assert got["out"] == ["plotting\n"] and r.logs.stdout == ["plotting\n"]
    pngs = [x for x in r.results if x.png]
    assert len(pngs) == 1 and pngs[0].png_bytes[:8] == b"\x89PNG\r\n\x1a\n"
    last = r.results[-1]
    assert (last.markdown, last.latex) == ("**bold**", "$x^2$") and last.svg.startswith("<svg")
    assert {"markdown", "latex", "svg", "text"} <= set(last.formats())
    assert len(got["res"]) == len(r.results)


def test_run_code_stream_events_arrive_as_they_happen(sb):
    t0 = time.monotonic()
    seen = []
    with sb.run_code_stream("import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.5)\n1/0") as events:
        for ev in events:
            seen.append((time.monotonic() - t0, ev))
    outs = [(t, e.text) for t, e in seen if e.type == "stdout"]
    assert [x for _, x in outs] == ["0\n", "1\n", "2\n"]
    assert outs[2][0] - outs[0][0] >= 0.8
    assert seen[-2][1].type == "error" and seen[-2][1].error.name == "ZeroDivisionError"
    assert seen[-1][1].type == "complete" and seen[-1][1].execution_count >= 1


def test_javascript_typescript_and_bad_languages(sb):
    js = sb.create_code_context("javascript")
    sb.run_code("const v = await new Promise(r => setTimeout(() => r(7), 10))", context=js)
    assert sb.run_code("v * 6", context=js).text == "42"
    r = sb.run_code("console.log('a', 1); ({k: [1, 2]})", context=js)
    assert r.stdout == "a 1\n" and r.results[0].json == {"k": [1, 2]}
    assert sb.run_code("const n: number = 5; n * n", language="typescript").text == "25"
    with pytest.raises(warren.UnsupportedLanguageError) as ei:
        sb.create_code_context("cobol")
    assert ei.value.status == 422
