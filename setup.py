from pathlib import Path

from setuptools import find_packages, setup

version = {}
exec(Path("aiter_lite/_version.py").read_text(), version)

setup(
    name="aiter_lite",
    version=version["__version__"],
    description="Triton kernels for LLM serving and training, with native PyTorch references",
    long_description=Path("README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["aiter_lite", "aiter_lite.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.11",
        "triton>=3.6",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6"],
        "bench": ["pandas>=1.5", "matplotlib>=3.5"],
        # aiter_lite.transformers patches Hugging Face models (tested with transformers 5.24)
        "hf": ["transformers>=4.48"],
    },
)
