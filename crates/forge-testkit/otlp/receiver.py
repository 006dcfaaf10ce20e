"""An OTLP receiver for Forge's telemetry tests, on the official protobuf definitions.

Listens for OTLP/HTTP (protobuf; gzip accepted) and OTLP/gRPC on loopback, decodes each export
request with `opentelemetry-proto`, and writes to OUT_DIR, per request:
  NNNNNN-<signal>-<transport>.pb    the request body exactly as it arrived (decompressed)
  NNNNNN-<signal>-<transport>.json  the decoded request (protobuf JSON mapping, ids in hex)
Prints "ready <http port> <grpc port>" once both listen.
Usage: receiver.py OUT_DIR
"""

import gzip
import itertools
import json
import os
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

OUT = sys.argv[1]
COUNTER = itertools.count()
LOCK = threading.Lock()

SIGNALS = {
    "/v1/traces": ("traces", trace_service_pb2.ExportTraceServiceRequest,
                   trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", metrics_service_pb2.ExportMetricsServiceRequest,
                    metrics_service_pb2.ExportMetricsServiceResponse),
    "/v1/logs": ("logs", logs_service_pb2.ExportLogsServiceRequest,
                 logs_service_pb2.ExportLogsServiceResponse),
}

HEX_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids(value):
    """The JSON mapping writes bytes as base64; ids read better (and compare) as hex."""
    import base64
    if isinstance(value, dict):
        return {k: (base64.b64decode(v).hex() if k in HEX_FIELDS and isinstance(v, str)
                    else hex_ids(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [hex_ids(v) for v in value]
    return value


def record(signal, transport, raw, message):
    with LOCK:
        n = next(COUNTER)
    stem = os.path.join(OUT, f"{n:06d}-{signal}-{transport}")
    decoded = hex_ids(json_format.MessageToDict(message))
    with open(stem + ".json.tmp", "w") as f:
        json.dump(decoded, f)
    with open(stem + ".pb", "wb") as f:
        f.write(raw)
    # Renamed last: a reader that sees the .json sees the whole request.
    os.rename(stem + ".json.tmp", stem + ".json")


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        signal = SIGNALS.get(self.path)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if signal is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        name, request, response = signal
        message = request()
        try:
            message.ParseFromString(body)
        except Exception:  # a body that is not the request: say so, as a collector would
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        record(name, "http", body, message)
        out = response().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        record("traces", "grpc", request.SerializeToString(), request)
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        record("metrics", "grpc", request.SerializeToString(), request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def Export(self, request, context):
        record("logs", "grpc", request.SerializeToString(), request)
        return logs_service_pb2.ExportLogsServiceResponse()


def main():
    http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"ready {http.server_address[1]} {grpc_port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
