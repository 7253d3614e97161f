"""The typed HTTP client of gpupool's REST API. The CLI and users' scripts use only this."""

from gpupool.client.api import ApiError, Client, ClientConfig, load_config, save_config

__all__ = ["ApiError", "Client", "ClientConfig", "load_config", "save_config"]
