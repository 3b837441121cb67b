#!/usr/bin/python3
"""cri-client.py: the few CRI calls a kubelet makes to run a pod, for containerd.bats' CRI test.

usage: cri-client.py SOCKET HANDLER VERB ARGS...
  run-pod NAME LOGDIR                       RunPodSandbox (host network), prints the sandbox id
  create POD PODNAME LOGDIR NAME IMAGE CMD...  CreateContainer in POD (run-pod PODNAME LOGDIR),
                                            prints the container id; its log is LOGDIR/NAME.log
  start ID | stop-pod POD | rm-pod POD      StartContainer / StopPodSandbox / RemovePodSandbox
  status ID                                 ContainerStatus as JSON {state, exit_code, reason, message}
  exec-sync ID CMD...                       ExecSync: prints stdout, exits with the exit code
  update ID MEMORY CPU_QUOTA CPU_PERIOD [CPU_SHARES]
                                            UpdateContainerResources (bytes, microseconds;
                                            0 leaves a field as it was: containerd)

No crictl in Debian: the messages are built at run time from a descriptor holding only the
fields used here, with the field numbers of the CRI runtime.v1 API (k8s.io/cri-api), so
there is no generated code. Needs python3-grpcio and python3-protobuf (Debian's python3).
The pod config depends only on its NAME and LOGDIR, so `create` sends the same one again.
Environment: CRI_PID_MODE=POD shares the pod's pid namespace; CRI_CGROUP_PARENT is the pod's
cgroup parent (a slice such as kubepods-besteffort-pod<uid>.slice with SystemdCgroup = true).
"""
import json
import os
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
TYPES = {"string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "int32": F.TYPE_INT32,
         "uint32": F.TYPE_UINT32, "int64": F.TYPE_INT64}

# message -> [(field, number, type)]; type is a scalar name, "Mode" (the NamespaceMode enum),
# a message name, or any of these with "repeated " in front.
MESSAGES = {
    "PodSandboxMetadata": [("name", 1, "string"), ("uid", 2, "string"), ("namespace", 3, "string"),
                           ("attempt", 4, "uint32")],
    "NamespaceOption": [("network", 1, "Mode"), ("pid", 2, "Mode"), ("ipc", 3, "Mode")],
    "LinuxSandboxSecurityContext": [("namespace_options", 1, "NamespaceOption")],
    "LinuxPodSandboxConfig": [("cgroup_parent", 1, "string"),
                              ("security_context", 2, "LinuxSandboxSecurityContext")],
    "PodSandboxConfig": [("metadata", 1, "PodSandboxMetadata"), ("hostname", 2, "string"),
                         ("log_directory", 3, "string"), ("linux", 8, "LinuxPodSandboxConfig")],
    "ContainerMetadata": [("name", 1, "string"), ("attempt", 2, "uint32")],
    "ImageSpec": [("image", 1, "string")],
    "ContainerConfig": [("metadata", 1, "ContainerMetadata"), ("image", 2, "ImageSpec"),
                        ("command", 3, "repeated string"), ("args", 4, "repeated string"),
                        ("log_path", 11, "string")],
    # state is the ContainerState enum, read as its number.
    "ContainerStatus": [("id", 1, "string"), ("state", 3, "int32"), ("exit_code", 7, "int32"),
                        ("reason", 10, "string"), ("message", 11, "string"), ("log_path", 15, "string")],
    "RunPodSandboxRequest": [("config", 1, "PodSandboxConfig"), ("runtime_handler", 2, "string")],
    "RunPodSandboxResponse": [("pod_sandbox_id", 1, "string")],
    "PodSandboxIdRequest": [("pod_sandbox_id", 1, "string")],
    "Empty": [],
    "CreateContainerRequest": [("pod_sandbox_id", 1, "string"), ("config", 2, "ContainerConfig"),
                               ("sandbox_config", 3, "PodSandboxConfig")],
    "ContainerIdRequest": [("container_id", 1, "string")],
    "CreateContainerResponse": [("container_id", 1, "string")],
    "ContainerStatusResponse": [("status", 1, "ContainerStatus")],
    "ExecSyncRequest": [("container_id", 1, "string"), ("cmd", 2, "repeated string"),
                        ("timeout", 3, "int64")],
    "LinuxContainerResources": [("cpu_period", 1, "int64"), ("cpu_quota", 2, "int64"),
                                ("cpu_shares", 3, "int64"), ("memory_limit_in_bytes", 4, "int64")],
    "UpdateContainerResourcesRequest": [("container_id", 1, "string"),
                                        ("linux", 2, "LinuxContainerResources")],
    "ExecSyncResponse": [("stdout", 1, "bytes"), ("stderr", 2, "bytes"), ("exit_code", 3, "int32")],
}
STATES = {0: "CREATED", 1: "RUNNING", 2: "EXITED", 3: "UNKNOWN"}


def build_classes():
    fdp = descriptor_pb2.FileDescriptorProto(name="fbcri.proto", package="runtime.v1", syntax="proto3")
    enum = fdp.enum_type.add(name="Mode")
    for i, name in enumerate(["POD", "CONTAINER", "NODE", "TARGET"]):
        enum.value.add(name=name, number=i)
    for name, fields in MESSAGES.items():
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype in fields:
            f = msg.field.add(name=fname, number=number, label=F.LABEL_OPTIONAL)
            if ftype.startswith("repeated "):
                f.label, ftype = F.LABEL_REPEATED, ftype[len("repeated "):]
            if ftype in TYPES:
                f.type = TYPES[ftype]
            elif ftype == "Mode":
                f.type, f.type_name = F.TYPE_ENUM, ".runtime.v1.Mode"
            else:
                f.type, f.type_name = F.TYPE_MESSAGE, ".runtime.v1." + ftype
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    factory = message_factory.MessageFactory(pool)  # GetPrototype: protobuf 4.21 (Debian 12)
    return {name: factory.GetPrototype(pool.FindMessageTypeByName("runtime.v1." + name))
            for name in MESSAGES}


M = build_classes()


def call(channel, method, request, response):
    stub = channel.unary_unary("/runtime.v1.RuntimeService/" + method,
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=M[response].FromString)
    return stub(request, timeout=60)


def pod_config(name, logdir):
    # No hostname: with the node's network the pod has the node's UTS namespace (kubelet does the same).
    cfg = M["PodSandboxConfig"](log_directory=logdir)
    cfg.metadata.name, cfg.metadata.uid, cfg.metadata.namespace = name, name + "-uid", "fbtest"
    ns = cfg.linux.security_context.namespace_options
    # NODE network (no CNI), POD ipc; pid CONTAINER unless CRI_PID_MODE=POD (shared with the pod).
    ns.network, ns.ipc = 2, 0
    ns.pid = 0 if os.environ.get("CRI_PID_MODE") == "POD" else 1
    # The pod's cgroup, as the kubelet names it: a slice with the systemd driver.
    if os.environ.get("CRI_CGROUP_PARENT"):
        cfg.linux.cgroup_parent = os.environ["CRI_CGROUP_PARENT"]
    return cfg


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    sock, handler, verb, args = argv[1], argv[2], argv[3], argv[4:]
    channel = grpc.insecure_channel("unix://" + sock)
    try:
        if verb == "run-pod":
            req = M["RunPodSandboxRequest"](config=pod_config(args[0], args[1]), runtime_handler=handler)
            print(call(channel, "RunPodSandbox", req, "RunPodSandboxResponse").pod_sandbox_id)
        elif verb == "create":
            pod, pod_name, logdir, name, image, cmd = args[0], args[1], args[2], args[3], args[4], args[5:]
            cfg = M["ContainerConfig"](command=cmd, log_path=name + ".log")
            cfg.metadata.name, cfg.image.image = name, image
            req = M["CreateContainerRequest"](pod_sandbox_id=pod, config=cfg,
                                              sandbox_config=pod_config(pod_name, logdir))
            print(call(channel, "CreateContainer", req, "CreateContainerResponse").container_id)
        elif verb == "start":
            call(channel, "StartContainer", M["ContainerIdRequest"](container_id=args[0]), "Empty")
        elif verb == "status":
            st = call(channel, "ContainerStatus", M["ContainerIdRequest"](container_id=args[0]),
                      "ContainerStatusResponse").status
            print(json.dumps({"state": STATES.get(st.state, str(st.state)), "exit_code": st.exit_code,
                              "reason": st.reason, "message": st.message, "log_path": st.log_path}))
        elif verb in ("stop-pod", "rm-pod"):
            method = "StopPodSandbox" if verb == "stop-pod" else "RemovePodSandbox"
            call(channel, method, M["PodSandboxIdRequest"](pod_sandbox_id=args[0]), "Empty")
        elif verb == "update":
            req = M["UpdateContainerResourcesRequest"](container_id=args[0])
            res = req.linux
            res.memory_limit_in_bytes, res.cpu_quota, res.cpu_period = int(args[1]), int(args[2]), int(args[3])
            if len(args) > 4:
                res.cpu_shares = int(args[4])
            call(channel, "UpdateContainerResources", req, "Empty")
        elif verb == "exec-sync":
            resp = call(channel, "ExecSync", M["ExecSyncRequest"](container_id=args[0], cmd=args[1:], timeout=30),
                        "ExecSyncResponse")
            sys.stdout.buffer.write(resp.stdout)
            sys.stderr.buffer.write(resp.stderr)
            return resp.exit_code
        else:
            sys.stderr.write(__doc__)
            return 2
    except grpc.RpcError as e:  # the server's message, e.g. the runtime's error
        sys.stderr.write("cri-client: %s: %s\n" % (verb, e.details()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
