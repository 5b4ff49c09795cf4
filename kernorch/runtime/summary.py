"""What a compile did, in plain words, and the per-kernel table (``CompiledModel.summary()``,
``kernorch compile`` and ``kernorch show``). Times are in ms or s, always with the unit."""

from __future__ import annotations

from collections import Counter

# provider name -> how a user would say who runs the kernel
RUNTIME_WORDS = {
    "c": "kernorch's generated C/OpenMP",
    "triton": "kernorch's generated Triton",
    "linear": "kernorch's linear kernels (PyTorch: oneDNN/BLAS, cuBLAS/cuDNN)",
    "torch": "PyTorch (oneDNN/BLAS linear)",
    "torch_onednn": "oneDNN fused linear",
    "torch_cl": "PyTorch channels-last linear",
    "torch_jit": "PyTorch JIT linear",
    "reference": "reference (opaque op)",
    "ort": "onnxruntime",
    "openvino": "OpenVINO",
    "openvino_bf16": "OpenVINO in bf16",
}
OWN = {"c", "triton", "linear", "torch", "torch_onednn", "torch_cl",
       "torch_jit", "host"}


def runtime_name(provider: str) -> str:
    base = provider.split(":")[0]
    return RUNTIME_WORDS.get(base, RUNTIME_WORDS.get(base.split("-")[0], provider))


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    x = seconds * 1e3
    return f"{x:.3f} ms" if x < 100 else f"{x:.1f} ms"


def what_ran_where(model) -> str:
    """One sentence: which runtime runs how many kernels and prims."""
    infos = model.executable.infos
    prims = len({m for i in infos for m in i.members})
    if len(infos) == 1 and infos[0].provider not in OWN:
        return f"the whole model ({prims} primitives) runs as one {runtime_name(infos[0].provider)} region"
    by: dict[str, list[int]] = {}
    for i in infos:
        by.setdefault(i.provider, []).append(len(i.members))
    parts = []
    for prov, sizes in sorted(by.items(), key=lambda kv: (kv[0] not in OWN, -len(kv[1]))):
        n = len(sizes)
        noun = ("kernel" if n == 1 else "kernels") if prov in OWN else ("region" if n == 1 else "regions")
        parts.append(f"{n} {runtime_name(prov)} {noun} ({sum(sizes)} prims)")
    own = sum(len(s) for p, s in by.items() if p in OWN)
    head = f"{len(infos)} {'kernel' if len(infos) == 1 else 'kernels'} for {prims} primitives"
    if own == len(infos):
        head += ", all kernorch's own"
    return head + ": " + ", ".join(parts)


def plain_summary(model, compare=None, seconds: float | None = None) -> list[str]:
    """Lines: plan (what ran where), tuning (time and counts), latency (vs onnxruntime / OpenVINO)."""
    r = model.report
    lines = [f"plan      {what_ran_where(model)}"]
    if r is not None:
        if r.exporter == "dynamo":
            lines.append("export    the module went through PyTorch's dynamo ONNX exporter (opset 18)")
        if r.opaque:
            lines.append(f"opaque    {sum(r.opaque.values())} op(s) without a fission rule, run whole: "
                         + ", ".join(f"{k} x{n}" for k, n in r.opaque.items()))
        secs = r.seconds
        tune = secs.get("orchestrate", 0.0)
        if r.cost == "model":
            how = "costs from the roofline model, nothing measured (--cost measured tunes on timed kernels)"
        elif getattr(r, "plan_reused", False):
            how = "the plan of an earlier compile of this model, kept in the tuning database (nothing measured)"
        elif getattr(r, "plan_transferred", False):
            how = (f"the plan of this model at other input sizes, its {r.measured} new kernels timed here "
                   f"({r.cached} prices from the tuning database)")
        else:
            how = (f"{r.measured} kernel timings, {r.cached} reused from the tuning database"
                   + (f", {r.predicted} of {r.candidates} candidates only predicted" if r.predicted else "")
                   + (f", {r.failed} candidates rejected (failed to build or verify)" if r.failed else ""))
        lines.append(f"tuning    {tune:.1f} s, strategy {r.strategy}: {how}")
        if r.cost == "measured" and getattr(r, "learned", ""):
            lines.append(f"          {r.learned}")
        note = r.timing_note() if hasattr(r, "timing_note") else ""
        if note:
            lines.append(f"          {note}")
        fallbacks = getattr(r, "fallbacks", None) or []
        if fallbacks:
            lines.append(f"fallback  {len(fallbacks)} generated kernel(s) failed (other kernels stand in), first: "
                         f"{fallbacks[0][:160]}")
        if getattr(r, "efficiency", ""):
            lines.append(f"warning   {r.efficiency}")
        e2e = getattr(r, "end_to_end", None) or {}
        priced = getattr(r, "priced_s", None)
        if priced and "plan" in e2e:
            hot = getattr(r, "priced_hot_s", None)
            how = f"prices in context (the first plan timed alone: {ms(hot)}, {len(r.context_rounds)} plans timed)" \
                if hot else "prices"
            lines.append(f"priced    the solver's plan: {ms(priced)} as the sum of its kernels' {how}, "
                         f"{ms(e2e['plan'])} measured end to end ({e2e['plan'] / priced:.2f}x)")
        if "plan" in e2e and len(e2e) > 1:
            what = {"plan": "solver's kernel plan", "whole region": "whole model as one region"}
            won = min(e2e, key=e2e.__getitem__)
            lines.append("choice    " + " vs ".join(f"{what.get(k, k)} {ms(t)}" for k, t in e2e.items())
                         + f" end to end: kept the {what.get(won, won)}")
        for i, acc in enumerate(getattr(r, "accuracy", None) or []):
            top1 = "" if acc["top1"] is None else f", top-1 agreement {acc['top1']:.1%}"
            lines.append(("accuracy  " if i == 0 else "          ") + f"{r.precision} vs float32 reference, "
                         f"{acc['output']}: max rel err {acc['max_rel_err']:.2e}, cosine {acc['cosine']:.5f}{top1}")
        if getattr(r, "calibration", ""):
            lines.append(f"int8      {r.calibration}")
        if secs:
            wall = "" if seconds is None else \
                f" ({seconds:.1f} s wall clock with start-up, saving and the latency comparison)"
            lines.append(f"time      import {secs.get('import', 0):.1f} s, rewrites {secs.get('rewrite', 0):.1f} s, "
                         f"tuning {tune:.1f} s, build {secs.get('build', 0):.1f} s{wall}")
    if compare is not None:
        lines += latency_lines(compare)
    return lines


def latency_lines(compare) -> list[str]:
    kn = compare.row("kernorch")
    out = []
    for name in ("onnxruntime", "openvino"):
        base = compare.row(name)
        if base is None or kn is None:
            continue
        x = base.median / kn.median
        if abs(x - 1) < 0.01:
            verdict = "as fast (within 1%)"
        else:
            verdict = f"{x:.2f}x faster" if x > 1 else f"{1 / x:.2f}x slower"
        out.append(f"latency   kernorch {ms(kn.median)} vs {name} {ms(base.median)} (medians of {len(kn.times)} and "
                   f"{len(base.times)} runs, same random inputs, {_threads(compare.threads)}): kernorch is {verdict}")
    for name, why in compare.skipped.items():
        if name == "onnxruntime":
            out.append(f"latency   kernorch {ms(kn.median) if kn else '-'}; no onnxruntime baseline ({why})")
    return out


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def kernel_table(model, feeds=None, repeat: int = 0) -> str:
    """Per kernel: provider, cost (priced, or measured in place when ``repeat`` and ``feeds``), share,
    prims (in order, or counted by op when there are many)."""
    infos = model.executable.infos
    if repeat and feeds is not None:
        secs = model.executable.profile(feeds, repeat)
        label = "measured"
    else:
        secs = [i.seconds or 0.0 for i in infos]
        label = "priced"
    total = sum(secs) or 1.0
    w = max([len("provider")] + [len(i.provider) for i in infos])
    how = ""
    if label == "priced":
        how = " (timed inside the model's calls)" if getattr(getattr(model, "report", None), "context_rounds", None) \
            else " (each timed alone: a model runs slower or faster end to end)"
    lines = [f"kernels   {len(infos)}, {label} total {ms(sum(secs))}{how}",
             f"{'#':>4} {'provider':<{w}} {label + ' ms':>11} {'share':>6}  prims"]
    for k, (info, s) in enumerate(zip(infos, secs)):
        lines.append(f"{k:>4} {info.provider:<{w}} {s * 1e3:>11.4f} {s / total:>6.1%}  {_ops(info.ops)}")
    return "\n".join(lines)


def _ops(ops, width: int = 90) -> str:
    text = " ".join(ops)
    if len(text) <= width:
        return text
    counts = Counter(ops).most_common()
    text = f"{len(ops)} prims: " + " ".join(f"{op} x{n}" for op, n in counts)
    if len(text) <= width:
        return text
    cut = text[:width].rsplit(" ", 1)[0]
    return cut + " ..."


def summary_text(model, feeds=None, repeat: int = 0) -> str:
    """``CompiledModel.summary()``: the plain-words lines, then the kernel table."""
    return "\n".join(plain_summary(model) + ["", kernel_table(model, feeds, repeat)])
