"""``kernorch inspect --segments``: the orchestrator's automatic segments of a model, after the
default rewrites, as the solver sees them (what compile() partitions before it solves)."""

from __future__ import annotations

from kernorch.ir.graph import Graph
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.partition import partition
from kernorch.rewrite.pipeline import apply_rewrites


def segment_lines(graph: Graph) -> list[str]:
    """The segments' table: a heading, their sizes, then one line per segment."""
    g, _ = apply_rewrites(graph)
    knobs = Knobs()
    segs = partition(dag_from_graph(g).without_dead(), max_segment_nodes=knobs.max_segment_nodes,
                     max_cut_width=knobs.max_cut_width, max_kernel_nodes=knobs.max_kernel_nodes)
    sizes = sorted(len(sg.nodes) for sg in segs)
    forced = sum(sg.forced for sg in segs)
    return [f"\nsegments ({len(segs)}; after rewrites {len(g.prims)} prims; "
            f"max_segment_nodes={knobs.max_segment_nodes}, max_cut_width={knobs.max_cut_width})",
            f"  sizes min/median/max  {sizes[0]}/{sizes[len(sizes) // 2]}/{sizes[-1]}; {forced} cut(s) not narrow",
            *(f"  #{k:<4} {len(sg.nodes):>5} prims  cut width {sg.width}{'  (forced)' if sg.forced else ''}"
              for k, sg in enumerate(segs))]
