"""Buffer planning: a value is never overwritten while someone still has to read it, also where
a kernel may write an output over one of its inputs (Step.overwrites)."""

from hypothesis import given, settings, strategies as st

from kernorch.runtime.memory import Step, plan_memory


@st.composite
def programs(draw):
    n = draw(st.integers(1, 25))
    steps, produced = [], []
    for i in range(n):
        ins = draw(st.lists(st.sampled_from(produced), max_size=3, unique=True)) if produced else []
        outs = [100 + i]
        if produced and draw(st.booleans()):
            outs.append(draw(st.sampled_from(produced)))  # a duplicated kernel re-writes a value
        over = ((100 + i, draw(st.sampled_from(ins))),) if ins and draw(st.booleans()) else ()
        steps.append(Step(tuple(ins), tuple(outs), over))
        produced.append(100 + i)
    types = {v: draw(st.sampled_from([4, 8, 12, 400])) for v in produced}  # bytes
    outputs = set(draw(st.lists(st.sampled_from(produced), min_size=1, max_size=2)))
    return steps, types, outputs


@settings(max_examples=300, deadline=None, derandomize=True)
@given(programs())
def test_slots_never_clobber_live_values(prog):
    steps, types, outputs = prog
    plan = plan_memory(steps, types, external=set(), outputs=outputs)
    holds: dict[int, int] = {}  # slot -> value id it currently holds
    written: set[int] = set()
    for i, s in enumerate(steps):
        m = plan.slot_of[i]
        for v in s.inputs:
            if v in outputs:
                continue
            assert holds.get(m[v]) == v, f"step {i} reads {v} from slot {m[v]} holding {holds.get(m[v])}"
        for v in s.outputs:
            if v in outputs:
                continue
            slot = m[v]
            assert plan.slots[slot] >= types[v]
            holds[slot] = v
            written.add(v)
    assert plan.nslots <= len(written)
