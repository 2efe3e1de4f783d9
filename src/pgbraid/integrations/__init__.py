"""Where other tools meet pgbraid: the MCP server, LangChain and LlamaIndex retrievers.

Each needs its optional extra (``pgbraid[mcp]``, ``pgbraid[langchain]``,
``pgbraid[llama-index]``); ``remote`` is the one HTTP client the retrievers share.
"""
