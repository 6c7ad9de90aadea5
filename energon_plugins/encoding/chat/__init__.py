"""Conversations: rendering them to text, tokenizing them with assistant-only labels, and the
crude conversation sample (``ChatMLSample``) the encoders read.

- :mod:`~energon_plugins.encoding.chat.rendering`: the chat template, or ``chat_template:
  plain`` chosen on purpose.
- :mod:`~energon_plugins.encoding.chat.conversation`: GPT-style turns, messages, tokenization
  with labels on the answers, image-token expansion.
- :mod:`~energon_plugins.encoding.chat.chatml`: ``ChatMLSample`` and the cookers of crude
  conversation datasets (what ``energon-plugins convert`` writes).

The task encoders, batch formats, ``convert`` and plugins import from here; nothing here
imports a task encoder.
"""
