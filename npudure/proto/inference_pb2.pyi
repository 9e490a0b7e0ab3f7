from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENCODING_UNSPECIFIED: _ClassVar[Encoding]
    ENCODING_RAW_RGB: _ClassVar[Encoding]
    ENCODING_JPEG: _ClassVar[Encoding]
    ENCODING_PNG: _ClassVar[Encoding]

class Fault(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAULT_NONE: _ClassVar[Fault]
    FAULT_HANG: _ClassVar[Fault]

class BoardState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOARD_STATE_UNSPECIFIED: _ClassVar[BoardState]
    BOARD_STATE_UP: _ClassVar[BoardState]
    BOARD_STATE_DOWN: _ClassVar[BoardState]
    BOARD_STATE_DRAINING: _ClassVar[BoardState]
    BOARD_STATE_HOT: _ClassVar[BoardState]
    BOARD_STATE_INACTIVE: _ClassVar[BoardState]
ENCODING_UNSPECIFIED: Encoding
ENCODING_RAW_RGB: Encoding
ENCODING_JPEG: Encoding
ENCODING_PNG: Encoding
FAULT_NONE: Fault
FAULT_HANG: Fault
BOARD_STATE_UNSPECIFIED: BoardState
BOARD_STATE_UP: BoardState
BOARD_STATE_DOWN: BoardState
BOARD_STATE_DRAINING: BoardState
BOARD_STATE_HOT: BoardState
BOARD_STATE_INACTIVE: BoardState

class InferRequest(_message.Message):
    __slots__ = ("request_id", "encoding", "frame", "width", "height", "model")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    encoding: Encoding
    frame: bytes
    width: int
    height: int
    model: str
    def __init__(self, request_id: _Optional[str] = ..., encoding: _Optional[_Union[Encoding, str]] = ..., frame: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., model: _Optional[str] = ...) -> None: ...

class Detection(_message.Message):
    __slots__ = ("class_id", "score", "x1", "y1", "x2", "y2", "label")
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    X1_FIELD_NUMBER: _ClassVar[int]
    Y1_FIELD_NUMBER: _ClassVar[int]
    X2_FIELD_NUMBER: _ClassVar[int]
    Y2_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    class_id: int
    score: float
    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    def __init__(self, class_id: _Optional[int] = ..., score: _Optional[float] = ..., x1: _Optional[float] = ..., y1: _Optional[float] = ..., x2: _Optional[float] = ..., y2: _Optional[float] = ..., label: _Optional[str] = ...) -> None: ...

class StageTiming(_message.Message):
    __slots__ = ("scheduler_queue_us", "route_us", "network_to_board_us", "board_queue_us", "decode_us", "preprocess_us", "inference_us", "postprocess_us", "board_total_us", "scheduler_total_us", "npu_input_us", "network_to_client_us", "client_total_us")
    SCHEDULER_QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    ROUTE_US_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TO_BOARD_US_FIELD_NUMBER: _ClassVar[int]
    BOARD_QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    DECODE_US_FIELD_NUMBER: _ClassVar[int]
    PREPROCESS_US_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_US_FIELD_NUMBER: _ClassVar[int]
    POSTPROCESS_US_FIELD_NUMBER: _ClassVar[int]
    BOARD_TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    NPU_INPUT_US_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TO_CLIENT_US_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    scheduler_queue_us: int
    route_us: int
    network_to_board_us: int
    board_queue_us: int
    decode_us: int
    preprocess_us: int
    inference_us: int
    postprocess_us: int
    board_total_us: int
    scheduler_total_us: int
    npu_input_us: int
    network_to_client_us: int
    client_total_us: int
    def __init__(self, scheduler_queue_us: _Optional[int] = ..., route_us: _Optional[int] = ..., network_to_board_us: _Optional[int] = ..., board_queue_us: _Optional[int] = ..., decode_us: _Optional[int] = ..., preprocess_us: _Optional[int] = ..., inference_us: _Optional[int] = ..., postprocess_us: _Optional[int] = ..., board_total_us: _Optional[int] = ..., scheduler_total_us: _Optional[int] = ..., npu_input_us: _Optional[int] = ..., network_to_client_us: _Optional[int] = ..., client_total_us: _Optional[int] = ...) -> None: ...

class InferResponse(_message.Message):
    __slots__ = ("request_id", "detections", "node", "timing", "backend", "emulated", "attempts", "model")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    EMULATED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    detections: _containers.RepeatedCompositeFieldContainer[Detection]
    node: str
    timing: StageTiming
    backend: str
    emulated: bool
    attempts: int
    model: str
    def __init__(self, request_id: _Optional[str] = ..., detections: _Optional[_Iterable[_Union[Detection, _Mapping]]] = ..., node: _Optional[str] = ..., timing: _Optional[_Union[StageTiming, _Mapping]] = ..., backend: _Optional[str] = ..., emulated: _Optional[bool] = ..., attempts: _Optional[int] = ..., model: _Optional[str] = ...) -> None: ...

class Reading(_message.Message):
    __slots__ = ("name", "value", "unit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: float
    unit: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[float] = ..., unit: _Optional[str] = ...) -> None: ...

class Telemetry(_message.Message):
    __slots__ = ("thermal_c", "cpu_freq_mhz", "npu", "process_cpu_user_s", "process_cpu_system_s", "sampled_at")
    THERMAL_C_FIELD_NUMBER: _ClassVar[int]
    CPU_FREQ_MHZ_FIELD_NUMBER: _ClassVar[int]
    NPU_FIELD_NUMBER: _ClassVar[int]
    PROCESS_CPU_USER_S_FIELD_NUMBER: _ClassVar[int]
    PROCESS_CPU_SYSTEM_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    thermal_c: _containers.RepeatedCompositeFieldContainer[Reading]
    cpu_freq_mhz: _containers.RepeatedCompositeFieldContainer[Reading]
    npu: _containers.RepeatedCompositeFieldContainer[Reading]
    process_cpu_user_s: float
    process_cpu_system_s: float
    sampled_at: float
    def __init__(self, thermal_c: _Optional[_Iterable[_Union[Reading, _Mapping]]] = ..., cpu_freq_mhz: _Optional[_Iterable[_Union[Reading, _Mapping]]] = ..., npu: _Optional[_Iterable[_Union[Reading, _Mapping]]] = ..., process_cpu_user_s: _Optional[float] = ..., process_cpu_system_s: _Optional[float] = ..., sampled_at: _Optional[float] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node", "backend", "emulated", "agent_version", "runtime_version", "model_sha256", "boot_id", "npu_cores", "in_flight", "queue_depth", "served_total", "errors_total", "cpu_cap_mhz", "telemetry", "hung_workers", "uptime_s", "serving", "not_serving_reasons", "rps", "utilization", "soc", "cpu_cap_note", "context_recoveries", "emulation_model_s_total", "emulation_actual_s_total", "stage_cpu", "stage_cpu_frames", "loop_thread_cpu_s", "contexts", "contexts_source", "models")
    NODE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    EMULATED_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    NPU_CORES_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    SERVED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CPU_CAP_MHZ_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    HUNG_WORKERS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    NOT_SERVING_REASONS_FIELD_NUMBER: _ClassVar[int]
    RPS_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    SOC_FIELD_NUMBER: _ClassVar[int]
    CPU_CAP_NOTE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    EMULATION_MODEL_S_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EMULATION_ACTUAL_S_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STAGE_CPU_FIELD_NUMBER: _ClassVar[int]
    STAGE_CPU_FRAMES_FIELD_NUMBER: _ClassVar[int]
    LOOP_THREAD_CPU_S_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    node: str
    backend: str
    emulated: bool
    agent_version: str
    runtime_version: str
    model_sha256: str
    boot_id: str
    npu_cores: int
    in_flight: int
    queue_depth: int
    served_total: int
    errors_total: int
    cpu_cap_mhz: int
    telemetry: Telemetry
    hung_workers: int
    uptime_s: float
    serving: bool
    not_serving_reasons: _containers.RepeatedScalarFieldContainer[str]
    rps: float
    utilization: float
    soc: str
    cpu_cap_note: str
    context_recoveries: int
    emulation_model_s_total: float
    emulation_actual_s_total: float
    stage_cpu: _containers.RepeatedCompositeFieldContainer[StageCpu]
    stage_cpu_frames: int
    loop_thread_cpu_s: float
    contexts: int
    contexts_source: str
    models: _containers.RepeatedCompositeFieldContainer[ModelStatus]
    def __init__(self, node: _Optional[str] = ..., backend: _Optional[str] = ..., emulated: _Optional[bool] = ..., agent_version: _Optional[str] = ..., runtime_version: _Optional[str] = ..., model_sha256: _Optional[str] = ..., boot_id: _Optional[str] = ..., npu_cores: _Optional[int] = ..., in_flight: _Optional[int] = ..., queue_depth: _Optional[int] = ..., served_total: _Optional[int] = ..., errors_total: _Optional[int] = ..., cpu_cap_mhz: _Optional[int] = ..., telemetry: _Optional[_Union[Telemetry, _Mapping]] = ..., hung_workers: _Optional[int] = ..., uptime_s: _Optional[float] = ..., serving: _Optional[bool] = ..., not_serving_reasons: _Optional[_Iterable[str]] = ..., rps: _Optional[float] = ..., utilization: _Optional[float] = ..., soc: _Optional[str] = ..., cpu_cap_note: _Optional[str] = ..., context_recoveries: _Optional[int] = ..., emulation_model_s_total: _Optional[float] = ..., emulation_actual_s_total: _Optional[float] = ..., stage_cpu: _Optional[_Iterable[_Union[StageCpu, _Mapping]]] = ..., stage_cpu_frames: _Optional[int] = ..., loop_thread_cpu_s: _Optional[float] = ..., contexts: _Optional[int] = ..., contexts_source: _Optional[str] = ..., models: _Optional[_Iterable[_Union[ModelStatus, _Mapping]]] = ...) -> None: ...

class ModelStatus(_message.Message):
    __slots__ = ("name", "default", "model_sha256", "contexts", "contexts_source", "in_flight", "queue_depth", "served_total", "input_size", "classes", "class_names")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_SOURCE_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    SERVED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    INPUT_SIZE_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    default: bool
    model_sha256: str
    contexts: int
    contexts_source: str
    in_flight: int
    queue_depth: int
    served_total: int
    input_size: int
    classes: int
    class_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., default: _Optional[bool] = ..., model_sha256: _Optional[str] = ..., contexts: _Optional[int] = ..., contexts_source: _Optional[str] = ..., in_flight: _Optional[int] = ..., queue_depth: _Optional[int] = ..., served_total: _Optional[int] = ..., input_size: _Optional[int] = ..., classes: _Optional[int] = ..., class_names: _Optional[_Iterable[str]] = ...) -> None: ...

class StageCpu(_message.Message):
    __slots__ = ("stage", "thread", "seconds")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    thread: str
    seconds: float
    def __init__(self, stage: _Optional[str] = ..., thread: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class SetCpuCapRequest(_message.Message):
    __slots__ = ("mhz",)
    MHZ_FIELD_NUMBER: _ClassVar[int]
    mhz: int
    def __init__(self, mhz: _Optional[int] = ...) -> None: ...

class InjectFaultRequest(_message.Message):
    __slots__ = ("fault",)
    FAULT_FIELD_NUMBER: _ClassVar[int]
    fault: Fault
    def __init__(self, fault: _Optional[_Union[Fault, str]] = ...) -> None: ...

class SetServingRequest(_message.Message):
    __slots__ = ("reasons",)
    REASONS_FIELD_NUMBER: _ClassVar[int]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class BoardStatus(_message.Message):
    __slots__ = ("name", "address", "state", "in_flight", "max_in_flight", "ewma_service_ms", "served_total", "failures_total", "consecutive_failures", "last_status", "last_status_age_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    EWMA_SERVICE_MS_FIELD_NUMBER: _ClassVar[int]
    SERVED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FAILURES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_AGE_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    state: BoardState
    in_flight: int
    max_in_flight: int
    ewma_service_ms: float
    served_total: int
    failures_total: int
    consecutive_failures: int
    last_status: NodeStatus
    last_status_age_s: float
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[_Union[BoardState, str]] = ..., in_flight: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., ewma_service_ms: _Optional[float] = ..., served_total: _Optional[int] = ..., failures_total: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., last_status: _Optional[_Union[NodeStatus, _Mapping]] = ..., last_status_age_s: _Optional[float] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("policy", "boards", "queue_depth", "queue_limit", "connections_per_board", "lease_holder", "scheduler_version", "served_total", "retries_total")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    BOARDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_PER_BOARD_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RETRIES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    policy: str
    boards: _containers.RepeatedCompositeFieldContainer[BoardStatus]
    queue_depth: int
    queue_limit: int
    connections_per_board: int
    lease_holder: str
    scheduler_version: str
    served_total: int
    retries_total: int
    def __init__(self, policy: _Optional[str] = ..., boards: _Optional[_Iterable[_Union[BoardStatus, _Mapping]]] = ..., queue_depth: _Optional[int] = ..., queue_limit: _Optional[int] = ..., connections_per_board: _Optional[int] = ..., lease_holder: _Optional[str] = ..., scheduler_version: _Optional[str] = ..., served_total: _Optional[int] = ..., retries_total: _Optional[int] = ...) -> None: ...

class SetActiveNodesRequest(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: str
    def __init__(self, policy: _Optional[str] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node", "drain")
    NODE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    node: str
    drain: bool
    def __init__(self, node: _Optional[str] = ..., drain: _Optional[bool] = ...) -> None: ...

class SetNodeCpuCapRequest(_message.Message):
    __slots__ = ("node", "mhz")
    NODE_FIELD_NUMBER: _ClassVar[int]
    MHZ_FIELD_NUMBER: _ClassVar[int]
    node: str
    mhz: int
    def __init__(self, node: _Optional[str] = ..., mhz: _Optional[int] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("holder", "ttl_s")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    holder: str
    ttl_s: float
    def __init__(self, holder: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("holder", "expires_in_s")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_S_FIELD_NUMBER: _ClassVar[int]
    holder: str
    expires_in_s: float
    def __init__(self, holder: _Optional[str] = ..., expires_in_s: _Optional[float] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RouteBoard(_message.Message):
    __slots__ = ("name", "address", "resolved")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    resolved: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., resolved: _Optional[str] = ...) -> None: ...

class Route(_message.Message):
    __slots__ = ("boards", "target", "service_config_json", "version", "tls", "max_message_bytes", "refresh_interval_s", "models")
    BOARDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SERVICE_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    REFRESH_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    boards: _containers.RepeatedCompositeFieldContainer[RouteBoard]
    target: str
    service_config_json: str
    version: str
    tls: bool
    max_message_bytes: int
    refresh_interval_s: float
    models: _containers.RepeatedCompositeFieldContainer[RouteModel]
    def __init__(self, boards: _Optional[_Iterable[_Union[RouteBoard, _Mapping]]] = ..., target: _Optional[str] = ..., service_config_json: _Optional[str] = ..., version: _Optional[str] = ..., tls: _Optional[bool] = ..., max_message_bytes: _Optional[int] = ..., refresh_interval_s: _Optional[float] = ..., models: _Optional[_Iterable[_Union[RouteModel, _Mapping]]] = ...) -> None: ...

class RouteModel(_message.Message):
    __slots__ = ("name", "default", "boards", "target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    BOARDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    default: bool
    boards: _containers.RepeatedScalarFieldContainer[str]
    target: str
    def __init__(self, name: _Optional[str] = ..., default: _Optional[bool] = ..., boards: _Optional[_Iterable[str]] = ..., target: _Optional[str] = ...) -> None: ...

class ReloadBoardsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadBoardsReply(_message.Message):
    __slots__ = ("added", "removed", "policy", "restart_needed", "status", "admin_tokens", "revoked_certificates")
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    RESTART_NEEDED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ADMIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REVOKED_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    added: _containers.RepeatedScalarFieldContainer[str]
    removed: _containers.RepeatedScalarFieldContainer[str]
    policy: str
    restart_needed: _containers.RepeatedScalarFieldContainer[str]
    status: ClusterStatus
    admin_tokens: int
    revoked_certificates: int
    def __init__(self, added: _Optional[_Iterable[str]] = ..., removed: _Optional[_Iterable[str]] = ..., policy: _Optional[str] = ..., restart_needed: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[ClusterStatus, _Mapping]] = ..., admin_tokens: _Optional[int] = ..., revoked_certificates: _Optional[int] = ...) -> None: ...
