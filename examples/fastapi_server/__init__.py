"""The example agent server's asyncio twin: FastAPI on Uvicorn, with inert as a guest of the loop.

The same chats, cues and tools as ``examples.agent_server`` (whose demo tools, replay and
provider choice it shares), on asyncio: the FastAPI app's lifespan opens the runtime with
``open_asyncio_runtime``, the providers are asked through their official SDKs, and their
streams go into the runtime with ``feed_stream``. Run it with ``python -m
examples.fastapi_server``.
"""

from ._agent import Agent, open_agent
from ._app import Chat, Confirmation, create_app
from ._sdk import Ask, sdk_client
from ._serve import running, serve

__all__ = [
    "Agent",
    "Ask",
    "Chat",
    "Confirmation",
    "create_app",
    "open_agent",
    "running",
    "sdk_client",
    "serve",
]
