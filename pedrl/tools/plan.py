r"""Will a GRPO run fit? Device memory per device, by part and by phase of a step.

  python -m pedrl.tools.plan --tutor=qwen2.5-7b --student=llama-3.1-8b --devices=4 --gpu=A100
  python -m pedrl.tools.plan --tutor=/models/Qwen2.5-7B-Instruct --student=... --devices=8 \
      --mesh=1,4,2 --gpu=H100 --cache_slots=4096 --micro_batch=2 --remat
  python -m pedrl.tools.plan --table        # the papers' setups on common GPU counts

--tutor and --student name an architecture (`pedrl.models.architectures`) or a
checkpoint directory (its config.json). The estimate is `pedrl.rl.memory.plan`
(its docstring lists what each part holds and its assumptions); the defaults
are paper 003's step (16 problems x 8 rollouts, 8192-token dialogues with
1024-token turns, K = 8 attempts of 3900 tokens, micro-batches of 8 rows of the
tutor's whole 8192-token side). A device's usable memory is --mem_fraction of
its total: jax takes 75% of a GPU unless XLA_PYTHON_CLIENT_MEM_FRACTION says
otherwise, so set it to the fraction used here. The last line is `fits=yes` or
`fits=no`.
"""
import dataclasses
import os
import sys
from collections.abc import Sequence

from absl import flags

from pedrl import cli, paths
from pedrl.bench import roofline
from pedrl.models import architectures
from pedrl.models.config import ModelConfig
from pedrl.rl import memory

FLAGS = flags.FLAGS
_RUN = memory.RunShape()


def define_flags() -> None:
  """The command's flags, defined when it runs (tests import the module beside others)."""
  flags.DEFINE_string("tutor", "qwen2.5-7b", "Tutor: an architecture name or a checkpoint dir.")
  flags.DEFINE_string("student", "llama-3.1-8b",
                      "Student: an architecture name or a checkpoint dir.")
  flags.DEFINE_integer("devices", 1, "Devices of the mesh.")
  flags.DEFINE_list("mesh", [], "data,fsdp,tensor sizes (default: every device on fsdp).")
  flags.DEFINE_string("gpu", "H100", f"Device kind, one of {sorted(roofline.DEVICE_MEMORY)}.")
  flags.DEFINE_float("memory_gb", 0.0, "Device memory in GB (overrides --gpu).")
  flags.DEFINE_float("mem_fraction", 0.9, "Share of a device's memory a run can use.")
  flags.DEFINE_integer("dialogues", _RUN.dialogues, "Dialogues per step (problems x group size).")
  flags.DEFINE_integer("cache_slots", _RUN.cache_slots, "KV slots per dialogue and side.")
  flags.DEFINE_integer("seq_len", _RUN.update_seq_len, "Tokens of a tutor side in the update.")
  flags.DEFINE_integer("micro_batch", _RUN.micro_batch, "Rows per gradient computation.")
  flags.DEFINE_integer("solve_rows", _RUN.solve_rows, "r_sol attempts sampled together.")
  flags.DEFINE_integer("solve_slots", _RUN.solve_slots, "KV slots per attempt.")
  flags.DEFINE_string("param_dtype", _RUN.param_dtype, "The tutor's weights, compute and cache.")
  flags.DEFINE_string("student_dtype", _RUN.student_dtype, "The student's weights and cache.")
  flags.DEFINE_bool("remat", _RUN.remat, "Rematerialized layers in the update.")
  flags.DEFINE_integer("logits_chunk", _RUN.logits_chunk,
                       "Positions per pass of the loss head (rl.logits_chunk; 0: all).",
                       lower_bound=0)
  flags.DEFINE_bool("table", False, "Print the papers' setups on common GPU counts and exit.")


@dataclasses.dataclass(frozen=True)
class Setup:
  """A paper's models and step, as its training section describes them."""
  paper: str
  tutor: str
  student: str
  dialogues: int
  hardware: str  # What the paper trained on.


SETUPS = (
    Setup("003 PedagogicalRL", "qwen2.5-7b", "llama-3.1-8b", 16 * 8, "4 x A100 80GB"),
    Setup("001 Thinking", "qwen3-8b", "llama-3.1-8b", 16 * 8, "4 GPUs"),
    Setup("000 UCO", "qwen2.5-7b", "qwen2.5-14b", 16 * 4, "8 x H200"),
)
# One host, and (16 GPUs) two hosts of 8: a pod job's mesh spans its hosts, the plan per device.
HARDWARE = (("H100", 1), ("A100", 4), ("H100", 8), ("H200", 8), ("H100", 16))


def model_config(name: str) -> ModelConfig:
  """An architecture's config, or a checkpoint directory's (its config.json; found as config
  paths are, testdata/… from any directory)."""
  if os.path.isdir(paths.find(name)):
    from pedrl.models.config import from_hf
    return from_hf(paths.find(name))
  return architectures.get(name).config()


def mesh_shape(devices: int, sizes: Sequence[int] | None) -> memory.MeshShape:
  """The mesh: `sizes` (data, fsdp, tensor), or every device on fsdp; a ValueError if
  they do not multiply to `devices`."""
  if not sizes:
    return memory.MeshShape(fsdp=devices)
  if len(sizes) != 3:
    raise ValueError(f"--mesh needs three sizes (data,fsdp,tensor), got {','.join(sizes)}")
  mesh = memory.MeshShape(*map(int, sizes))
  if mesh.devices != devices:
    raise ValueError(f"--mesh={','.join(sizes)} has {mesh.devices} devices, --devices={devices}")
  return mesh


def device_bytes(gpu: str, memory_gb: float, fraction: float) -> float:
  if memory_gb:
    return memory_gb * 1e9 * fraction
  total = roofline.by_kind(roofline.DEVICE_MEMORY, gpu)
  if total is None:
    raise ValueError(f"--gpu={gpu}: unknown; one of {sorted(roofline.DEVICE_MEMORY)} or "
                     "--memory_gb")
  return total * fraction


def gib(b: float) -> str:
  return f"{b / memory.GIB:.1f}"


def print_plan(p: memory.Plan, header: str) -> None:
  print(header)
  for name, b in p.parts.items():
    print(f"  {name:<18}{gib(b):>9} GiB")
  for name, b in p.phases.items():
    print(f"  phase {name:<12}{gib(b):>9} GiB")
  phase, peak = p.peak
  print(f"peak: {phase}, {gib(peak)} of {gib(p.device_bytes)} GiB usable per device")
  print(f"fits={'yes' if p.fits else 'no'}")


def lean(run: memory.RunShape, devices: int) -> memory.RunShape:
  """The step with the memory levers pedrl has: rematerialized layers, one row per
  device per micro-batch, dialogues (caches, tutor sides) of 4096 tokens."""
  tokens = 4096
  return dataclasses.replace(run, remat=True, micro_batch=devices, update_seq_len=tokens,
                             cache_slots=tokens + run.cache_slots - run.update_seq_len,
                             solve_slots=tokens + run.solve_slots - run.update_seq_len)


def print_table(run: memory.RunShape, fraction: float) -> None:
  """Per paper setup and GPU count (every device on fsdp): the largest phase per device
  and whether it fits, as configured (`run`) and with the levers of `lean`."""
  print(f"{'setup':<18}{'paper trained on':<18}{'GPUs':<10}{'as configured':<24}"
        f"{'lean':<24}")
  for s in SETUPS:
    tutor, student = model_config(s.tutor), model_config(s.student)
    for gpu, n in HARDWARE:
      mesh, usable = memory.MeshShape(fsdp=n), device_bytes(gpu, 0, fraction)
      cells = []
      for shape in (run, lean(run, n)):
        p = memory.plan(tutor, student, mesh, dataclasses.replace(shape, dialogues=s.dialogues),
                        usable)
        phase, peak = p.peak
        cells.append(f"{'fits' if p.fits else 'no'}: {gib(peak)} {phase}")
      print(f"{s.paper:<18}{s.hardware:<18}{f'{n} x {gpu}':<10}{cells[0]:<24}{cells[1]:<24}")


def main(argv: list[str]) -> None:
  del argv
  run = memory.RunShape(FLAGS.dialogues, FLAGS.cache_slots, FLAGS.seq_len, FLAGS.micro_batch,
                        FLAGS.solve_rows, FLAGS.solve_slots, FLAGS.param_dtype,
                        FLAGS.student_dtype, FLAGS.remat, logits_chunk=FLAGS.logits_chunk)
  if FLAGS.table:
    print_table(run, FLAGS.mem_fraction)
    return
  try:
    mesh = mesh_shape(FLAGS.devices, FLAGS.mesh)
    usable = device_bytes(FLAGS.gpu, FLAGS.memory_gb, FLAGS.mem_fraction)
    tutor, student = model_config(FLAGS.tutor), model_config(FLAGS.student)
  except (ValueError, FileNotFoundError) as e:
    sys.exit(f"error: {e}")
  p = memory.plan(tutor, student, mesh, run, usable)
  print_plan(p, f"tutor {FLAGS.tutor}, student {FLAGS.student}; mesh data={mesh.data} "
                f"fsdp={mesh.fsdp} tensor={mesh.tensor}; {run}")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
