"""Input of ``fsa-interactive``: one bad line is reported and skipped, the session goes on.

fairseq's interactive reader (``fairseq_cli.interactive.buffered_read``) opens the input
as text with universal newlines, so

- a lone CR inside a line split it into two sentences, and every later sentence id shifted
  by one (the ids are the input line numbers);
- one line of invalid UTF-8 ended the whole session with a ``UnicodeDecodeError``;
- one line longer than the model's source positions ended it with ``Size of sample #0 is
  invalid`` (or, with ``--skip-invalid-size-inputs-valid-test``, was dropped silently).

Here the input is read as bytes and split only on ``\\n`` (a CR inside a line is
whitespace to the tokenizer; a CRLF line ending is stripped like any trailing space), each
line is decoded on its own, and :func:`make_batches` leaves out a line that cannot be
decoded or is too long, with one line on stderr naming its number
(``fsa-interactive: error: input line 3: ...; skipped``).  The ids of the other lines stay
their input line numbers (0-based, as fairseq counts them).  The session translates every
other line, then ends with one line counting the lines left out and exit status 1
(:func:`skipped_summary`), so that a batch run over ``--input FILE`` can tell from its
status that a line has no translation.
"""

import sys

PREFIX = "fsa-interactive: error: "


class InputLine(str):
    """A line of input with its 1-based ``number`` and, when it cannot be translated, the
    ``problem``."""

    number: int = 0
    problem = None

    @classmethod
    def make(cls, text, number, problem=None):
        line = cls(text)
        line.number, line.problem = number, problem
        return line


def decode_line(raw: bytes, number: int) -> InputLine:
    """One input line (without its ``\\n``) as text, or an empty line with the problem."""
    try:
        return InputLine.make(raw.decode("utf-8").strip(), number)
    except UnicodeDecodeError as e:
        return InputLine.make("", number, f"not valid UTF-8 ({e.reason} at byte {e.start})")


def read_lines(stream):
    """InputLines from a binary stream, split on ``\\n`` only."""
    for number, raw in enumerate(stream, 1):
        yield decode_line(raw[:-1] if raw.endswith(b"\n") else raw, number)


def buffered_read(input, buffer_size):
    """``fairseq_cli.interactive.buffered_read`` with the reading above."""
    stream = sys.stdin.buffer if input == "-" else open(input, "rb")
    buffer = []
    try:
        for line in read_lines(stream):
            buffer.append(line)
            if len(buffer) >= buffer_size:
                yield buffer
                buffer = []
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if buffer:
        yield buffer


#: the numbers of the input lines left out in this process (:func:`report`)
SKIPPED = []


def report(line, message, out=None):
    SKIPPED.append(line.number)
    print(f"{PREFIX}input line {line.number}: {message}; skipped", file=out or sys.stderr, flush=True)


def skipped_summary():
    """The error that ends a session in which lines were left out (None when none was)."""
    if not SKIPPED:
        return None
    numbers = ", ".join(str(n) for n in SKIPPED[:10]) + (", ..." if len(SKIPPED) > 10 else "")
    lines = "line" if len(SKIPPED) == 1 else "lines"
    return f"{PREFIX}{len(SKIPPED)} input {lines} left out, without a translation ({lines} {numbers}; see above)"


def source_limit(max_positions):
    """The source side of fairseq's resolved ``max_positions`` (an int or a tuple)."""
    if isinstance(max_positions, (tuple, list)):
        return max_positions[0]
    return max_positions


def make_batches_skipping_bad_lines(original):
    """``make_batches`` that leaves out undecodable and too long lines (reported) and keeps
    the ids of the others equal to their place in ``lines``."""
    import torch

    def make_batches(lines, cfg, task, max_positions, encode_fn):
        limit = source_limit(max_positions)
        keep = []
        for i, line in enumerate(lines):
            problem = getattr(line, "problem", None)
            if problem is None and limit is not None:
                _, lengths = task.get_interactive_tokens_and_lengths([line], encode_fn)
                if lengths[0] > limit:
                    problem = (
                        f"{lengths[0]} tokens (with the end of sentence), more than the "
                        f"model's {limit} source positions"
                    )
            if problem is not None:
                report(line if hasattr(line, "number") else InputLine.make(line, i + 1), problem)
            else:
                keep.append(i)
        if not keep:
            return
        for batch in original([lines[i] for i in keep], cfg, task, max_positions, encode_fn):
            ids = torch.tensor([keep[i] for i in batch.ids.tolist()], dtype=batch.ids.dtype)
            yield batch._replace(ids=ids)

    return make_batches


def install():
    """Patch ``fairseq_cli.interactive`` (used by ``fsa-interactive`` only)."""
    import fairseq_cli.interactive as interactive

    if getattr(interactive.make_batches, "_fsa_input", False):
        return
    make_batches = make_batches_skipping_bad_lines(interactive.make_batches)
    make_batches._fsa_input = True
    interactive.make_batches = make_batches
    interactive.buffered_read = buffered_read
