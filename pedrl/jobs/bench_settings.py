"""The settings of the MathTutorBench job and of CPA's, which runs it per method and
seed (pedrl.experiments.mathtutorbench, .cpa), read from their config files.

Here, not in a lower layer, because they hold the job's top level and mesh
(JobSettings, MeshSettings); like pedrl.jobs.settings they import no JAX, so each
job reads them in its early check (pedrl.cli.check_job), before the models load.
"""
import dataclasses

import ml_collections

from pedrl.agents.settings import AgentRuns, CPASettings
from pedrl.env.settings import EndpointSettings, PartySettings
from pedrl.eval.settings import BenchSettings, PedRMSettings, ShardSettings, TutorRun
from pedrl.jobs.settings import JobSettings, MeshSettings, Reader


@dataclasses.dataclass(frozen=True)
class MathTutorBenchSettings:
  job: JobSettings
  mesh: MeshSettings
  tutor: PartySettings
  run: TutorRun
  endpoint: EndpointSettings
  bench: BenchSettings
  pedrm: PedRMSettings
  shard: ShardSettings


@dataclasses.dataclass(frozen=True)
class CPAJobSettings(MathTutorBenchSettings):
  """The benchmark job's settings, the agent's (`cpa`) and which methods and seeds run."""
  cpa: CPASettings = CPASettings()
  agents: AgentRuns = AgentRuns()


def sections(r: Reader) -> tuple:
  """MathTutorBenchSettings' fields, read from the config (CPA reads more after them)."""
  return (r.read(JobSettings), r.read(MeshSettings, "mesh"), r.read(PartySettings, "tutor"),
          r.read(TutorRun, "tutor"), r.read(EndpointSettings, "tutor.endpoint"),
          r.read(BenchSettings), r.read(PedRMSettings, "pedrm"), r.read(ShardSettings, "eval"))


def read_mathtutorbench(config: ml_collections.ConfigDict) -> MathTutorBenchSettings:
  """The MathTutorBench job's settings; every key must be read (else ValueError)."""
  r = Reader(config)
  out = MathTutorBenchSettings(*sections(r))
  r.check_all_read()
  return out


def read_cpa(config: ml_collections.ConfigDict) -> CPAJobSettings:
  """The CPA job's settings; every key must be read (else ValueError)."""
  r = Reader(config)
  out = CPAJobSettings(*sections(r), r.read(CPASettings, "cpa"), r.read(AgentRuns, "agents"))
  r.check_all_read()
  return out
