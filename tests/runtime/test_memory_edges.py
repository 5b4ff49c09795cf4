"""Buffer planning edges that the clobber property cannot see (mutation testing found them): a value
nobody reads is scratch, its slot reused at once; the plan names the graph outputs (fresh tensors)."""

from kernorch.runtime.memory import Step, plan_memory

TYPES = {v: 8 for v in (1, 2, 3)}  # bytes


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


def test_slots_are_bytes_reused_across_sizes():
    """A chain of values of different sizes needs two slots (what a step reads and what it
    writes), each as large as the largest value it held: dead bytes are reused whatever the size."""
    sizes = {1: 100, 2: 8, 3: 200, 4: 50, 5: 4}
    steps = [Step((), (1,)), Step((1,), (2,)), Step((2,), (3,)), Step((3,), (4,)), Step((4,), (5,))]
    plan = plan_memory(steps, sizes, external=set(), outputs={5})
    assert plan.nslots == 2
    assert sorted(plan.slots) == [50, 200]  # 1 then 3 in one slot (grown to 200), 2 then 4 in the other (to 50)
    assert plan.slot_of[1][2] == plan.slot_of[3][4] != plan.slot_of[2][3]


def test_an_output_takes_the_slot_of_the_input_it_overwrites_when_that_input_dies():
    steps = [Step((), (1,)), Step((1,), (2,), overwrites=((2, 1),)), Step((2,), (3,))]
    plan = plan_memory(steps, TYPES, external=set(), outputs={3})
    assert plan.slot_of[1][2] == plan.slot_of[1][1] and plan.nslots == 1


def test_an_input_read_later_or_too_small_is_not_overwritten():
    later = [Step((), (1,)), Step((1,), (2,), overwrites=((2, 1),)), Step((1, 2), (3,))]
    plan = plan_memory(later, TYPES, external=set(), outputs={3})
    assert plan.slot_of[1][2] != plan.slot_of[1][1]
    small = [Step((), (1,)), Step((1,), (2,), overwrites=((2, 1),)), Step((2,), (3,))]
    plan = plan_memory(small, {1: 4, 2: 8, 3: 8}, external=set(), outputs={3})
    assert plan.slot_of[1][2] != plan.slot_of[1][1]
    external = [Step((1,), (2,), overwrites=((2, 1),)), Step((2,), (3,))]  # a graph input is never overwritten
    plan = plan_memory(external, TYPES, external={1}, outputs={3})
    assert 1 not in plan.slot_of[0]
