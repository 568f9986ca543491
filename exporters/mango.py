"""mango-sdk-agent: the node's device inventory (GPUs, NICs, RDMA devices, BMC) as an HTTP API.

A FastAPI app served by uvicorn. Its answers come from the same discovery
functions the exporters use (NVML, amdgpu sysfs/amdsmi, /sys/class/infiniband,
the BMC client), so the inventory and the metrics never disagree. ``/docs`` is
the OpenAPI page and doubles as the liveness URL; it is served with the Swagger UI
files installed with drf-spectacular-sidecar, so it works on nodes without
Internet access (FastAPI's default page loads its scripts from a CDN).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from exporters.amd import AmdGpuSource
from exporters.bmc import BmcSource, client_from_settings
from exporters.nvidia import NvmlSource
from exporters.runtime import BackendStatus, Exporter, Options, mac_version
from exporters.sw import SoftwareSource
from node.config import node_config
from node.hardware import discover_interfaces, discover_rdma_devices
from node.host import Roots


def swagger_static_dir() -> Path | None:
    """The Swagger UI files shipped with drf-spectacular-sidecar, when installed."""
    try:
        import drf_spectacular_sidecar
    except ImportError:
        return None
    path = Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar"
    return path / "swagger-ui-dist" if (path / "swagger-ui-dist").is_dir() else None


class Gpu(BaseModel):
    vendor: str = Field(description="nvidia or amd")
    index: str = Field(description="GPU index as the exporters label it (gpu / gpu_id)")
    model: str
    uuid: str = Field("", description="NVIDIA UUID or AMD serial number")
    pci_address: str = ""


class Nic(BaseModel):
    name: str
    mac_address: str = ""
    operstate: str = ""
    mtu: int | None = None
    speed_mbps: int | None = None
    driver: str = ""


class RdmaPortModel(BaseModel):
    port: str
    state: str = ""
    rate_bytes_per_second: float | None = None
    link_layer: str = ""


class RdmaDeviceModel(BaseModel):
    device: str
    iface: str
    vendor: str = Field(description="mellanox, broadcom, mangoboost, intel or unknown")
    driver: str
    pci_address: str = ""
    pci_id: str = ""
    firmware: str = ""
    node_guid: str = ""
    ports: list[RdmaPortModel] = []


class Bmc(BaseModel):
    protocol: str = Field(description="redfish, ipmi or none")
    answers: bool
    reason: str = ""


class Inventory(BaseModel):
    hostname: str
    mac_version: str
    gpus: list[Gpu]
    nics: list[Nic]
    rdma: list[RdmaDeviceModel]
    bmc: Bmc
    software: dict[str, str]


def list_nics(roots: Roots) -> list[Nic]:
    """Network interfaces from <sys>/class/net (loopback and virtual bridges included)."""
    return [
        Nic(
            name=nic.name,
            mac_address=nic.mac_address,
            operstate=nic.operstate,
            mtu=nic.mtu,
            speed_mbps=nic.speed_mbps,
            driver=nic.driver,
        )
        for nic in discover_interfaces(roots)
    ]


class DeviceInventory:
    """Gathers the inventory through the exporters' own sources."""

    def __init__(
        self,
        options: Options,
        nvml: ModuleType | None = None,
        amdsmi: ModuleType | bool | None = None,
        env: dict | None = None,
    ):
        self.options = options
        self.nvidia = NvmlSource(options.hostname, nvml=nvml)
        self.amd = AmdGpuSource(options.roots, amdsmi=amdsmi)
        settings = node_config(options.roots, env)
        client, reason = client_from_settings(settings, options.roots)
        self.bmc = BmcSource(client, reason)
        self.software = SoftwareSource(options.roots)

    def gpus(self) -> list[Gpu]:
        found = [
            Gpu(vendor="nvidia", index=g.gpu, model=g.model, uuid=g.uuid, pci_address=g.pci_bus_id)
            for g in self.nvidia.discover()
        ]
        found += [
            Gpu(
                vendor="amd",
                index=g.gpu_id,
                model=g.card_model,
                uuid=g.serial_number,
                pci_address=g.pci_address,
            )
            for g in self.amd.gpus()
        ]
        return found

    def rdma(self) -> list[RdmaDeviceModel]:
        return [
            RdmaDeviceModel(**dev.to_dict()) for dev in discover_rdma_devices(self.options.roots)
        ]

    def bmc_status(self) -> Bmc:
        return Bmc(**self.bmc.health()["bmc"])

    def all(self) -> Inventory:
        return Inventory(
            hostname=self.options.hostname,
            mac_version=mac_version(),
            gpus=self.gpus(),
            nics=list_nics(self.options.roots),
            rdma=self.rdma(),
            bmc=self.bmc_status(),
            software=self.software.versions(),
        )


class InventorySource:
    """mac_inventory_devices{kind}: how many devices the inventory API lists."""

    name = "inventory"

    def __init__(self, inventory: DeviceInventory):
        self.inventory = inventory

    def backends(self) -> list[BackendStatus]:
        inv = self.inventory
        return [*inv.nvidia.backends(), *inv.amd.backends(), *inv.bmc.backends()]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "mac_inventory_devices", "Devices listed by the inventory API.", labels=["kind"]
        )
        family.add_metric(["gpu"], len(self.inventory.gpus()))
        family.add_metric(["nic"], len(list_nics(self.inventory.options.roots)))
        family.add_metric(["rdma"], len(self.inventory.rdma()))
        yield family


def create_app(inventory: DeviceInventory) -> FastAPI:
    """The FastAPI app; ``inventory`` decides where every answer comes from."""
    app = FastAPI(
        title="MAC mango-sdk-agent",
        version=mac_version(),
        description="The node's devices (GPUs, NICs, RDMA devices, BMC), read live.",
        docs_url=None,
        redoc_url=None,
    )
    exporter = Exporter(
        "mango-sdk-agent", [InventorySource(inventory)], timeout=inventory.options.timeout
    )
    static = swagger_static_dir()
    if static is not None:
        app.mount("/static/swagger-ui", StaticFiles(directory=static), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        if static is None:  # still a 200 page that names the spec, without the UI
            return HTMLResponse(
                "<!doctype html><title>MAC mango-sdk-agent API</title>"
                '<p>OpenAPI document: <a href="/openapi.json">/openapi.json</a></p>'
            )
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="MAC mango-sdk-agent API",
            swagger_js_url="/static/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/static/swagger-ui/swagger-ui.css",
            swagger_favicon_url="/static/swagger-ui/favicon-32x32.png",
        )

    @app.get("/v1/inventory", response_model=Inventory, summary="Everything at once")
    def get_inventory() -> Inventory:
        return inventory.all()

    @app.get("/v1/gpus", response_model=list[Gpu], summary="NVIDIA and AMD GPUs")
    def get_gpus() -> list[Gpu]:
        return inventory.gpus()

    @app.get("/v1/nics", response_model=list[Nic], summary="Network interfaces")
    def get_nics() -> list[Nic]:
        return list_nics(inventory.options.roots)

    @app.get("/v1/rdma", response_model=list[RdmaDeviceModel], summary="RDMA devices and ports")
    def get_rdma() -> list[RdmaDeviceModel]:
        return inventory.rdma()

    @app.get("/v1/bmc", response_model=Bmc, summary="Whether the BMC answers")
    def get_bmc() -> Bmc:
        return inventory.bmc_status()

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(exporter.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health", include_in_schema=False)
    def health() -> JSONResponse:
        return JSONResponse(exporter.health())

    return app


def build(options: Options) -> FastAPI:
    return create_app(DeviceInventory(options))
