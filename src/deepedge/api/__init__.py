"""The REST API of the job service (FastAPI); thin: parse, call the service, render."""
