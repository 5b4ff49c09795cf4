"""Buffer planning edges that the clobber property cannot see (mutation testing found them): a value
nobody reads is scratch, its slot reused at once; the plan names the graph outputs (fresh tensors)."""

from kernorch.runtime.memory import Step, plan_memory

TYPES = {v: (8, "float32") for v in (1, 2, 3)}


def test_a_value_nobody_reads_is_scratch_and_its_slot_is_reused():
    steps = [Step((), (1,)), Step((), (2,)), Step((2,), (3,))]  # 1 is written at step 0, never read
    plan = plan_memory(steps, TYPES, external=set(), outputs={3})
    assert plan.nslots == 1
    assert plan.slot_of[0][1] == plan.slot_of[1][2] == plan.slot_of[2][2]


def test_the_plan_names_the_graph_outputs():
    steps = [Step((), (1,)), Step((1,), (2,)), Step((2,), (3,))]
    plan = plan_memory(steps, TYPES, external=set(), outputs={2, 3})
    assert plan.output_values == frozenset({2, 3})
    assert 2 not in plan.slot_of[1] and 3 not in plan.slot_of[2]
