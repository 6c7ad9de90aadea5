"""What ``preview`` and ``bench`` show of a batch, apart from the command line.

- :mod:`~energon_plugins.preview.batch_view`: a row's spans (text, image tokens, loss),
  batch statistics, the loop batch's layout and record keys;
- :mod:`~energon_plugins.preview.images`: the pixels of a row back as images and video frames;
- :mod:`~energon_plugins.preview.audio`: each audio clip fed to the processor as a waveform
  strip and a sparkline, with its audio-token span;
- :mod:`~energon_plugins.preview.rows`: :func:`~energon_plugins.preview.rows.collect_rows`,
  the rows of the first batches of a datamodule;
- :mod:`~energon_plugins.preview.html`: one self-contained HTML page of those rows;
- :mod:`~energon_plugins.preview.mix_view`: the table of a blend's realised mix next to its
  configured weights (after ``bench`` and ``preview``).

Plugin tests use ``collect_rows`` to check what a user would see.
"""
