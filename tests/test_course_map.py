"""The course map (amp_lab.course): it agrees with the notebooks' headers and README's table, and tells each
machine (faked from real cpuinfo, sysctl and GPU facts) a story composed from its own verdict."""

import re
from pathlib import Path

import nbformat
import pytest
import torch

from amp_lab import course, cpus, gpus, hardware
from amp_lab.course import LESSONS, course_map, on_this_machine
from amp_lab.text import REASONS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.file)
def test_notebook_exists_and_states_the_same_time(lesson):
    path = ROOT / "notebooks" / lesson.file
    assert path.exists(), f"{lesson.file} is on the course map but not in notebooks/"
    nb = nbformat.read(path, as_version=4)
    header = " ".join(c.source for c in nb.cells[:3] if c.cell_type == "markdown")
    minutes = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", header)
    assert minutes, f"{lesson.file}: no '**Time:** about N minutes' in its first cells"
    assert int(minutes.group(1)) == lesson.minutes


def test_readme_table_matches_course_map():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| \[`(\d\d_[a-z0-9_]+)`\]\(notebooks/\1\.ipynb\) \|[^|]*\| (\d+) min \|$", readme, re.M)
    assert [(f"{name}.ipynb", int(m)) for name, m in rows] == [(lesson.file, lesson.minutes) for lesson in LESSONS]


def test_every_numbered_notebook_is_on_the_map():
    on_disk = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert on_disk == sorted(lesson.file for lesson in LESSONS)


def test_every_notebook_with_exercises_has_executed_solutions():
    for lesson in LESSONS[1:]:
        nb = nbformat.read(ROOT / "notebooks" / lesson.file, as_version=4)
        assert any("## Exercises" in c.source for c in nb.cells if c.cell_type == "markdown"), lesson.file
        solution = ROOT / "notebooks" / "solutions" / lesson.file.replace(".ipynb", "_solutions.ipynb")
        assert solution.exists(), f"missing {solution.relative_to(ROOT)}"
        sol = nbformat.read(solution, as_version=4)
        assert all(c.execution_count is not None for c in sol.cells if c.cell_type == "code"), solution.name


# ---------------------------------------------------------------------------------------------
# What each notebook will do on *other* machines: the sentences follow the verdict
# ---------------------------------------------------------------------------------------------

AVX2 = "model name\t: AMD EPYC\nflags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni vaes\n"
SAPPHIRE_RAPIDS = (
    "model name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512vl "
    "avx512_vnni avx_vnni avx512_bf16 amx_bf16 avx512_fp16 amx_tile amx_int8\n"
)
ZEN4 = "model name\t: AMD EPYC 9R14\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni\n"
GRAVITON3 = (
    "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
    "jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp "
    "svei8mm svebf16 i8mm bf16 dgh rng\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n"
    "CPU part\t: 0xd40\nCPU revision\t: 1\n"
)
GRAVITON2 = (
    "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
    "lrcpc dcpop asimddp ssbs\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n"
    "CPU part\t: 0xd0c\nCPU revision\t: 1\n"
)
M2 = "machdep.cpu.brand_string: Apple M2\nhw.optional.arm.FEAT_BF16: 1\nhw.optional.arm.FEAT_FP16: 1\nhw.optional.arm64: 1\n"


@pytest.fixture(scope="module")
def here():
    return hardware.describe("cpu")


def machine(here, kind, arg=None):
    if kind == "cuda":
        return hardware.report_for("cuda", capability=arg[1], gpu_name=arg[0], base=here)
    if kind == "mac":
        return hardware.report_for("cpu", flags=cpus.cpu_flags(sysctl=arg), system="Darwin", base=here)
    if kind == "mps":
        return hardware.report_for("mps", flags=cpus.cpu_flags(sysctl=M2), system="Darwin", base=here)
    return hardware.report_for("cpu", flags=cpus.cpu_flags(arg), cpu=cpus.cpu_model(arg), system="Linux",
                               base=here)  # fmt: skip


# name: (kind, facts, dtype, words in 06's sentence, words in 07's sentence)
MACHINES = {
    "AVX2 laptop": ("cpu", AVX2, torch.bfloat16, ["bfloat16 autocast on cpu", "expect AMP to be slower than FP32"],
                    ["bfloat16 on the CPU without a GradScaler", "expects AMP not to beat FP32"]),
    "Zen 4 (AVX512-BF16)": ("cpu", ZEN4, torch.bfloat16, ["AVX512-BF16", "expect AMP to be faster than FP32"],
                            ["bfloat16 on the CPU", "expects AMP to beat FP32 on large matrices"]),
    "Sapphire Rapids": ("cpu", SAPPHIRE_RAPIDS, torch.bfloat16, ["AMX-BF16", "expect AMP to be faster than FP32"],
                        ["bfloat16 on the CPU", "expects AMP to beat FP32 on large matrices"]),
    "Graviton 3 (ARM bf16)": ("cpu", GRAVITON3, torch.bfloat16, ["ARM BF16", "expect AMP to be faster than FP32"],
                              ["bfloat16 on the CPU", "expects AMP to beat FP32 on large matrices"]),
    "Graviton 2 (no bf16)": ("cpu", GRAVITON2, torch.bfloat16, ["no ARM BF16", "expect AMP to be slower than FP32"],
                             ["bfloat16 on the CPU", "expects AMP not to beat FP32"]),
    "Mac M2 CPU": ("mac", M2, torch.bfloat16, ["Apple CPU with ARM BF16", "no faster than FP32"],
                   ["bfloat16 on the CPU", "expects AMP not to beat FP32"]),
    "Mac M2 GPU": ("mps", None, torch.float16, ["float16 autocast on mps", "modest speed-up at most"],
                   ["float16 on the Apple GPU (MPS) with a GradScaler", "leaves the speed to the measurement"]),
    "V100 (Volta)": ("cuda", ("Tesla V100", (7, 0)), torch.float16,
                     ["float16 autocast on cuda", "Volta", "with a GradScaler", "clearly faster"],
                     ["float16 on Tesla V100 with a GradScaler", "expects AMP to beat FP32"]),
    "T4 (Turing)": ("cuda", ("Tesla T4", (7, 5)), torch.float16,
                    ["float16 autocast on cuda", "Turing", "with a GradScaler", "clearly faster"],
                    ["float16 on Tesla T4 with a GradScaler", "expects AMP to beat FP32"]),
    "A100 (Ampere)": ("cuda", ("NVIDIA A100", (8, 0)), torch.bfloat16,
                      ["bfloat16 autocast on cuda", "Ampere", "no GradScaler needed", "clearly faster"],
                      ["bfloat16 on NVIDIA A100 without a GradScaler", "expects AMP to beat FP32"]),
    "H100 (Hopper)": ("cuda", ("NVIDIA H100", (9, 0)), torch.bfloat16,
                      ["bfloat16 autocast on cuda", "Hopper", "no GradScaler needed", "clearly faster"],
                      ["bfloat16 on NVIDIA H100 without a GradScaler", "expects AMP to beat FP32"]),
    "GTX 1080 (Pascal)": ("cuda", ("GeForce GTX 1080", (6, 1)), torch.float16,
                          ["float16 autocast on cuda", "without Tensor Cores", "little or no speed-up"],
                          ["float16 on GeForce GTX 1080 with a GradScaler", "expects AMP not to beat FP32"]),
}  # fmt: skip


@pytest.mark.parametrize("name", MACHINES)
def test_course_map_tells_each_machine_its_own_story(here, name):
    kind, facts, dtype, race_words, recipe_words = MACHINES[name]
    report = machine(here, kind, facts)
    assert report.race_dtype is dtype
    rows = dict((file, text) for file, _, text in course_map(report))
    race, recipe = rows["06_timing_race.ipynb"], rows["07_amp_training_recipe.ipynb"]
    assert report.verdict in race
    for w in race_words:
        assert w in race, (w, race)
    for w in recipe_words:
        assert w in recipe, (w, recipe)
    # Both sentences name the one dtype the machine's decision picked.
    assert str(dtype).removeprefix("torch.") in race and str(dtype).removeprefix("torch.") in recipe


@pytest.mark.parametrize("name", MACHINES)
def test_course_map_states_predictions_not_results(here, name):
    kind, facts, *_ = MACHINES[name]
    for _, _, text in course_map(machine(here, kind, facts)):
        for claim in ("AMP wins", "AMP loses", "AMP is slower", "AMP is faster", "will be faster", "will be slower"):
            assert claim not in text


@pytest.mark.parametrize(
    "facts, words",
    [
        (SAPPHIRE_RAPIDS, "multiplies FP16 in hardware (AVX512-FP16)"),
        (ZEN4, "no FP16 matmul instructions"),
        (AVX2, "no FP16 matmul instructions"),
        (GRAVITON3, "unknown"),  # ARM FP16 arithmetic is not counted as a native fp16 matmul
    ],
)
def test_fp16_training_on_a_cpu_follows_its_instructions(here, facts, words):
    text = dict((f, t) for f, _, t in course_map(machine(here, "cpu", facts)))["04_loss_scaling_from_scratch.ipynb"]
    assert text.startswith("trains in FP16 on the CPU") and words in text


def test_course_map_on_this_machine_follows_describe():
    report = hardware.describe("cpu")
    rows = course_map()
    assert [(f, m) for f, m, _ in rows] == [(lesson.file, lesson.minutes) for lesson in LESSONS]
    assert rows == course_map(report)


@pytest.mark.parametrize(
    "kind, facts",
    [("cuda", ("GPU", cap)) for cap in [(7, 5), (7, 0), (8, 0), (8, 9), (9, 0), (10, 0), (12, 0), (6, 1)]]
    + [("cpu", AVX2), ("cpu", SAPPHIRE_RAPIDS), ("cpu", GRAVITON2), ("mac", M2), ("mps", None)],
    ids=lambda v: str(v[1]) if isinstance(v, tuple) else None,
)
def test_07_names_the_dtype_and_scaler_its_decision_flow_picks(here, kind, facts):
    """The course map's line for 07 and 07's own decision flow (amp.choose_amp_dtype) name one dtype."""
    from amp_lab.amp import choose_amp_dtype

    report = machine(here, kind, facts)
    choice = choose_amp_dtype(report)
    reading = on_this_machine(lesson("07"), report)
    assert reading.facts["dtype"] == str(choice.dtype).removeprefix("torch.")
    assert reading.outcome == ("course.07_scaler" if choice.use_scaler else "course.07_no_scaler")


def test_07_follows_the_facts_of_a_report_whose_verdict_is_stale(here):
    """A T4 made by replacing the GPU facts of this CPU's report keeps the CPU's stored verdict (bfloat16);
    07's flow reads the facts (float16 with a GradScaler), and so must the course map."""
    import dataclasses

    from amp_lab.amp import choose_amp_dtype

    t4 = dataclasses.replace(here, race_device="cuda", cuda_available=True, gpu_name="Tesla T4", capability=(7, 5),
                             tensor_cores=gpus.tensor_core_generation((7, 5)), bf16_supported=True)  # fmt: skip
    assert t4.race_dtype == torch.bfloat16 and choose_amp_dtype(t4).dtype == torch.float16
    reading = on_this_machine(lesson("07"), t4)
    assert (reading.outcome, reading.facts["dtype"], reading.facts["where"]) == ("course.07_scaler", "float16", "Tesla T4")


def test_course_map_refuses_a_report_of_the_wrong_type():
    with pytest.raises(TypeError, match="report must be a MachineReport"):
        course_map("cpu")


@pytest.mark.parametrize("name", MACHINES)
def test_09_names_where_the_pitfalls_run(here, name):
    """09 runs its pitfalls on the machine's device; the subnormal timing is a CPU pitfall everywhere."""
    kind, facts, *_ = MACHINES[name]
    report = machine(here, kind, facts)
    reading = on_this_machine(lesson("09"), report)
    assert reading.outcome == ("course.09_cpu" if report.race_device == "cpu" else "course.09_elsewhere")
    if report.race_device == "cuda":
        assert reading.facts["where"] == report.gpu_name


@pytest.mark.parametrize("name", MACHINES)
def test_08_says_where_its_fp8_matmuls_run(here, name):
    """08's FP8 matmuls run on Tensor Cores only from compute capability 8.9 (H100 here); every other
    machine in the table runs them on the CPU, emulated, and is told so."""
    kind, facts, *_ = MACHINES[name]
    report = machine(here, kind, facts)
    reading = on_this_machine(lesson("08"), report)
    if report.race_device == "cuda" and report.capability >= (8, 9):
        assert (reading.outcome, reading.facts["where"]) == ("course.08_gpu", report.gpu_name)
    elif report.race_device == "cuda":
        assert reading.outcome == "course.08_gpu_without_fp8"
    else:
        assert reading.outcome == "course.08_cpu"


def lesson(number: str):
    return next(x for x in LESSONS if x.file.startswith(number))


def test_a_notebook_joins_the_map_by_being_there(tmp_path):
    """The map is read from the notebooks: a new one with a heading and a time is on it; one without is refused."""
    import nbformat.v4 as v4

    nbformat.write(v4.new_notebook(cells=[v4.new_markdown_cell("# 11 · A new lesson\n\n**Time:** about 20 minutes")]),
                   tmp_path / "11_new.ipynb")  # fmt: skip
    assert course.lessons(tmp_path) == (course.Lesson("11_new.ipynb", "A new lesson", 20),)
    nbformat.write(v4.new_notebook(cells=[v4.new_markdown_cell("# no number")]), tmp_path / "12_bad.ipynb")
    with pytest.raises(ValueError, match="12_bad.ipynb"):
        course.lessons(tmp_path)


def test_every_reading_of_the_map_is_in_the_table(here):
    for name in MACHINES:
        kind, facts, *_ = MACHINES[name]
        report = machine(here, kind, facts)
        for x in LESSONS:
            assert all(code in REASONS for code in on_this_machine(x, report).codes)


def test_the_map_is_in_notebook_order_with_09_after_07():
    """The map lists the notebooks by number: 08 (FP8) follows 07, and 09 comes last."""
    files = [lesson.file for lesson in LESSONS]
    assert files == sorted(files)
    assert files.index("09_pitfalls.ipynb") > files.index("07_amp_training_recipe.ipynb")


def _last_value(source: str, namespace: dict):
    """Run a cell's ``source`` in ``namespace`` and return the value of its last expression, as Jupyter shows it."""
    import ast

    tree = ast.parse(source)
    last = tree.body.pop()
    exec(compile(tree, "<cell>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)


def test_00_shows_every_notebook_on_disk_in_a_cell_nbval_checks():
    """00 lists the course from LESSONS in a cell nbval compares (08 was once missing from a stored map that an
    NBVAL_IGNORE_OUTPUT cell hid): the list it shows is the numbered notebooks on disk, in order, and so is
    its stored output once executed."""
    nb = nbformat.read(ROOT / "notebooks" / "00_setup_check.ipynb", as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and "LESSONS" in c.source and "Table(" in c.source]
    assert len(cells) == 1, "00 shows the course's list in exactly one cell"
    cell = cells[0]
    assert not cell.source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT"), "the course list must be checked by nbval"
    on_disk = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    table = _last_value(cell.source, {})
    assert [row[0] for row in table.rows] == on_disk
    assert [(row[0], int(row[2])) for row in table.rows] == [(x.file, x.minutes) for x in course.lessons()]
    for out in cell.get("outputs", []):  # the stored output, where the notebook has been executed
        shown = re.findall(r"^(\d\d_[a-z0-9_]+\.ipynb)\s", out.get("data", {}).get("text/plain", ""), re.M)
        assert shown == on_disk
