"""attn_plugin: "Attention Is All You Need" (Vaswani et al., 2017) as a fairseq plugin, and attn_kit,
the recipes' library. Install from a git checkout with ``pip install -e .``: the kit runs from the
checkout, where the recipes' settings, the bundled data and the results files live beside the code
(a reproduction's users clone it), so there is no wheel of settings and no console scripts. A plain
``pip install .`` still gives a working plugin (``import attn_plugin``, fairseq's --user-dir); the
kit's commands that need the checkout's files then say so in one error line (attn_kit/checkout.py).

fairseq 0.12.2 does not import on Python >= 3.11: ``fairseq-fixed`` (fairseq's main branch with the
fixes) installs the same ``fairseq``. Its build imports torch: install torch first and fairseq-fixed
with ``--no-build-isolation`` (``scripts/env.sh`` does all of this).
"""
from setuptools import find_packages, setup

setup(
    name="attn_plugin",
    version="0.1.0",
    description='fairseq plugin reproducing "Attention Is All You Need", with its recipes\' library '
                '(attn_kit, used from a git checkout: pip install -e .)',
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["attn_plugin", "attn_plugin.*", "attn_kit", "attn_kit.*",
                                    # lab: the project's own measuring and describing code, beside the
                                    # kit, imported by nothing in it
                                    "lab", "lab.*"]),
    package_data={"attn_kit.planning": ["calibration.json"]},  # the measurements a plan needs (lab.calibration)
    python_requires=">=3.9",
    install_requires=[
        "fairseq-fixed==0.12.3.1; python_version >= '3.11'",
        "fairseq==0.12.2; python_version < '3.11'",
        "torch>=2.0",
        "numpy",
        "sacremoses>=0.0.53",
        "subword-nmt>=0.3.8",
        "sacrebleu>=2.0",
        "pyyaml",
        "nltk",  # Penn Treebank tokenization of raw sentences for the parser (scripts/translate.py)
        "scipy",  # Spearman rank correlation of recipes/table3.sh
    ],
    extras_require={"test": ["pytest>=7"], "plot": ["matplotlib"],
                    "ct2": ["ctranslate2>=4"],  # scripts/export_ctranslate2.py, translate.py --engine ctranslate2
                    "hf": ["transformers==5.24.0"]},  # scripts/export_hf.py (the version tested)
)
