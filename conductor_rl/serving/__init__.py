"""Serving a trained Conductor: the OpenAI chat-completions format (`chat_format`)
and who may ask it how much (`access`). The Ray Serve application is built on these."""
