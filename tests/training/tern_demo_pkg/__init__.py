"""Module-form entry point for the tern end-to-end tests.

``python -m tern_demo_pkg --ckpt PATH --total-samples N [...]`` (with
tests/training on PYTHONPATH) runs the training loop of train_ddp.py, with
the same options.
"""


def main(argv=None):
    from train_ddp import main as train_main

    return train_main(argv)
