"""Everything registers with fairseq through --user-dir, with the paper's sizes."""
import argparse
import ast
import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import USER_DIR, cli, last_line, run, run_main
from fairseq import options
from fairseq.dataclass.utils import gen_parser_from_dataclass


def parsed(arch, *flags):
    return options.parse_args_and_arch(
        options.get_training_parser(), ["unused", "--user-dir", USER_DIR, "--arch", arch, *flags])


def test_registries_hold_the_plugin_components():
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

    parsed("attn_paper_base")
    for arch in ("attn_paper_base", "attn_paper_big", "attn_paper_big_en_fr", "attn_paper_parse"):
        assert ARCH_MODEL_REGISTRY[arch].__name__ == "AttnTransformerModel"
    assert "attn_inverse_sqrt" in LR_SCHEDULER_REGISTRY
    assert "attn_label_smoothed_cross_entropy" in CRITERION_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    assert TASK_REGISTRY["attn_translation"].__name__ == "AttnTranslationTask"


@pytest.mark.parametrize("arch,d_model,d_ff,h,layers,p_drop", [
    ("attn_paper_base", 512, 2048, 8, 6, 0.1),     # Table 3, base
    ("attn_paper_big", 1024, 4096, 16, 6, 0.3),    # Table 3, big
    ("attn_paper_big_en_fr", 1024, 4096, 16, 6, 0.1),  # Sec. 6.1
    # Sec. 6.3: 4 layers, d_model 1024, the rest as the base model (P_drop was tuned; its value is
    # not given, so the base 0.1 stays)
    ("attn_paper_parse", 1024, 2048, 8, 4, 0.1),
])
def test_architectures_have_the_papers_sizes(arch, d_model, d_ff, h, layers, p_drop):
    a = parsed(arch)
    for side in ("encoder", "decoder"):
        assert getattr(a, f"{side}_embed_dim") == d_model
        assert getattr(a, f"{side}_ffn_embed_dim") == d_ff
        assert getattr(a, f"{side}_attention_heads") == h
        assert getattr(a, f"{side}_layers") == layers
    assert a.dropout == p_drop


def test_parse_architecture_follows_sec_6_3_and_t2t_where_the_paper_is_silent():
    """Sec. 6.3: 4 layers, d_model 1024, otherwise the base model (h=8, d_ff=2048, so
    d_k = d_v = 128); attention dropout 0.2 from t2t's transformer_parsing_base
    (the paper tuned it but gives no value, the base model has none)."""
    a = parsed("attn_paper_parse")
    assert (a.encoder_layers, a.decoder_layers) == (4, 4)
    assert a.encoder_embed_dim // a.encoder_attention_heads == 128
    assert (a.dropout, a.attention_dropout, a.activation_dropout) == (0.1, 0.2, 0.0)
    assert a.attention_key_dim is None and a.attention_value_dim is None  # d_model / h
    assert not a.no_share_all_embeddings  # shared embeddings as the base model (Sec. 3.4), not t2t's
    b = parsed("attn_paper_parse", "--attention-dropout", "0.1", "--dropout", "0.3")
    assert (b.dropout, b.attention_dropout) == (0.3, 0.1)


def test_parse_architecture_parameter_count():
    """attn_paper_parse with the WSJ-only 16K vocabulary against a count by hand from
    N=4, d_model=1024, d_ff=2048 (h does not change it): every projection has a bias,
    LayerNorms have gain and bias, one embedding matrix is shared by the encoder,
    the decoder and the pre-softmax linear (Sec. 3.4), positions are sinusoids."""
    from attn_kit.fairseq_layer.build import build_model, count_parameters, plugin_flags

    V, d, d_ff, N = 16000, 1024, 2048, 4
    attention = 4 * (d * d + d)                  # W^Q, W^K, W^V, W^O
    ffn = d * d_ff + d_ff + d_ff * d + d         # W_1, b_1, W_2, b_2
    layer_norm = 2 * d
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    expected = V * d + N * (encoder_layer + decoder_layer)
    assert expected == 100_384_768
    assert count_parameters(build_model(plugin_flags(arch="attn_paper_parse"), vocab_size=V)) == expected


def test_command_line_overrides_win_over_architecture_defaults():
    a = parsed("attn_paper_big", "--dropout", "0.2", "--decoder-layers", "3")
    assert (a.dropout, a.decoder_layers, a.encoder_layers) == (0.2, 3, 6)


def test_user_dir_pointing_at_the_installed_package(tmp_path):
    """--user-dir works with the package's installed location, from any directory."""
    installed = importlib.util.find_spec("attn_plugin").submodule_search_locations[0]
    code = ("from fairseq import options; a = options.parse_args_and_arch(options.get_training_parser(), "
            f"['unused', '--user-dir', {installed!r}, '--arch', 'attn_paper_parse']); "
            "print('layers', a.encoder_layers, a.encoder_embed_dim)")
    proc = run([sys.executable, "-c", code], cwd=tmp_path)
    assert "layers 4 1024" in proc.stdout


def test_help_strings_explain_lr_and_eps_ls():
    """fairseq-train --help lists no plugin options (fairseq prints help before it
    adds them), so check the help that fairseq-train shows once they are added."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

    parsed("attn_paper_base")
    parser = argparse.ArgumentParser()
    gen_parser_from_dataclass(parser, LR_SCHEDULER_REGISTRY["attn_inverse_sqrt"].__dataclass())
    gen_parser_from_dataclass(parser, CRITERION_REGISTRY["attn_label_smoothed_cross_entropy"].__dataclass())
    text = " ".join(parser.format_help().split())
    assert "--lr is ignored by this schedule" in text
    assert "eps_ls" in text and "--lr-scale" in text and "--warmup-updates" in text


def test_unknown_arch_is_one_clear_error(data_bin):
    # fairseq-train as a process of its own, as the user types it (most tests' fairseq commands are forked: conftest.run)
    proc = run([cli("fairseq-train"), data_bin, "--user-dir", USER_DIR, "--arch", "attn_paper_huge", "--cpu"],
               check=False, fork=False)
    assert proc.returncode != 0
    assert "invalid choice: 'attn_paper_huge'" in last_line(proc)
    assert "Traceback" not in proc.stderr


def test_missing_data_directory_names_the_directory(tmp_path):
    missing = tmp_path / "no-such-data-bin"
    proc = run([cli("fairseq-train"), missing, "--user-dir", USER_DIR, "--arch", "attn_paper_base", "--cpu",
                "--criterion", "attn_label_smoothed_cross_entropy", "--lr-scheduler", "attn_inverse_sqrt",
                "--optimizer", "adam", "--lr", "1", "--max-tokens", "100", "--save-dir", tmp_path / "ckpt"],
               check=False)
    assert proc.returncode != 0
    assert str(missing) in last_line(proc) and "no such file or directory" in last_line(proc).lower()


# --------------------------------------------------------------------------- what loading the plugin changes
MESSAGES = ["refused to load x.pt: its pickle asks for 'os.system'", "two\nlines  ", "  padded ",
            "error: already prefixed", ""]


@pytest.mark.parametrize("message", MESSAGES)
def test_plugin_and_library_format_errors_alike(message):
    """attn_plugin.errors.error_line is a copy of attn_kit.cli.error_line (the plugin imports
    nothing from attn_kit); the two must agree."""
    from attn_kit.cli import error_line as library_line
    from attn_plugin.errors import error_line as plugin_line

    assert plugin_line(message) == library_line(message)
    assert plugin_line(message).startswith("error: ") and "\n" not in plugin_line(message)


def test_plugin_and_library_print_the_same_error_line():
    """An AttnPluginError printed by the plugin's sys.excepthook (uncaught in a fairseq command, so a
    process) and by attn_kit.cli.main_guard (a library command; in this process, conftest.run_main): the
    same one line, exit status 1."""
    from attn_plugin.errors import CheckpointError

    raise_it = ("from attn_plugin.errors import CheckpointError\n"
                "def main():\n    raise CheckpointError('bad\\nfile.pt')\n")
    plugin = run([sys.executable, "-c", f"import attn_plugin\n{raise_it}main()"], check=False)

    def main(argv):
        raise CheckpointError("bad\nfile.pt")

    library = run_main(main)
    for proc in (plugin, library):
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert last_line(plugin) == last_line(library) == "error: bad file.pt"


def test_fairseq_patches_install_once():
    """install() runs when the plugin is imported; a second call wraps nothing twice."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    from attn_plugin import errors, fairseq_patches

    patched = (checkpoint_utils.load_checkpoint_to_cpu, distributed_utils._broadcast_object_slow)
    assert all(getattr(f, "_attn_plugin", False) for f in patched)
    assert sys.excepthook is errors.excepthook
    fairseq_patches.install()
    assert (checkpoint_utils.load_checkpoint_to_cpu, distributed_utils._broadcast_object_slow) == patched
    assert sys.excepthook is errors.excepthook


def test_plugin_imports_nothing_from_the_library():
    """--user-dir attn_plugin loads the plugin alone: no module of it imports attn_kit."""
    plugin = Path(importlib.util.find_spec("attn_plugin").submodule_search_locations[0])
    offenders = []
    for path in sorted(plugin.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "attn_kit"]
    assert len(list(plugin.rglob("*.py"))) > 10 and offenders == []


def test_a_second_copy_of_the_plugin_is_one_line(tmp_path):
    """Two copies of the plugin in one process were fairseq tracebacks: --user-dir naming another folder
    called attn_plugin (fairseq's "not globally unique" ImportError) and a copy under another name
    ("Cannot register duplicate model"). Each is one line naming both copies."""
    import os
    import shutil
    import subprocess

    from conftest import REPO

    same, other = tmp_path / "same" / "attn_plugin", tmp_path / "other" / "attn_plugin_v2"
    for copy in (same, other):
        shutil.copytree(REPO / "attn_plugin", copy, ignore=shutil.ignore_patterns("__pycache__"))
    data = tmp_path / "bin"
    data.mkdir()
    for script, where in ((f"import attn_plugin\nfrom fairseq import options\n"
                           f"options.parse_args_and_arch(options.get_training_parser(), "
                           f"[{str(data)!r}, '--user-dir', {str(same)!r}, '--arch', 'attn_paper_base'])\n", same),
                          ("import attn_plugin, attn_plugin_v2\n", other)):  # the copy on PYTHONPATH
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(other.parent), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
        errors = [line for line in proc.stderr.splitlines() if not line.startswith("INFO:")]  # fairseq's import note
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
        assert errors[0].startswith("error: ") and "a second copy of the plugin" in errors[0]
        assert str(where) in errors[0] and str(REPO / "attn_plugin") in errors[0]
