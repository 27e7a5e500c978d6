"""The frame of fairseq_cli.train's ``main``, found up the stack from a fairseq function it
calls (``load_checkpoint``, ``verify_checkpoint_directory``): its globals hold the training
loop (``train``, ``validate_and_save``; also when run as ``python -m fairseq_cli.train``),
its locals the run's ``cfg``.  Used by the preemption and save_dir_lock patches."""


def training_main_frame(frame, depth=40):
    """That frame, searched from ``frame`` up at most ``depth`` frames, or None."""
    for _ in range(depth):
        if frame is None:
            return None
        g = frame.f_globals
        if frame.f_code.co_name == "main" and callable(g.get("validate_and_save")) and callable(g.get("train")):
            return frame
        frame = frame.f_back
    return None
