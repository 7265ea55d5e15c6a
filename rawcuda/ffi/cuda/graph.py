"""Layer 0, driver table section: stream capture and CUDA graphs -- record work once, replay it with one launch.

The part cust leaves to hand-written FFI (the seed article, section 3). Two ways to build a graph:
*capture* (cuStreamBeginCapture ... cuStreamEndCapture turns the launches issued on a stream into
nodes instead of running them) or *explicit* nodes (cuGraphAddKernelNode). Either way the graph is then
*instantiated* into an executable graph, whose kernel parameters can be updated in place.
"""

from __future__ import annotations

from ctypes import POINTER, c_char_p, c_size_t, c_uint, c_ulonglong, c_void_p

from ..decl import decl
from ..types import (
    CUDA_KERNEL_NODE_PARAMS,
    CUgraph,
    CUgraphExec,
    CUgraphExecUpdateResultInfo,
    CUgraphNode,
    CUlaunchAttributeValue,
    CUstream,
    P,
    cuuint64_t,
    enum,
)

ENTRIES = [
    # --- capture
    # _v2 added the capture *mode*; refusing the legacy stream (handle 0) is left to the caller.
    decl(
        "CUresult cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode)",
        "cuStreamBeginCapture_v2",
        CUstream,
        enum,
    ),
    decl("CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)", "cuStreamEndCapture", CUstream, P(CUgraph)),
    decl(
        "CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)",
        "cuStreamIsCapturing",
        CUstream,
        P(enum),
    ),
    # _v3 added the edge data. After a launch, the capturing stream's dependencies are the node just added:
    # how a captured launch finds its kernel node (rawcuda.graphs.graph, Graph.record_launch).
    decl(
        "CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, "
        "cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, "
        "const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)",
        "cuStreamGetCaptureInfo_v3",
        CUstream,
        P(enum),
        P(cuuint64_t),
        P(CUgraph),
        P(P(CUgraphNode)),
        P(c_void_p),
        P(c_size_t),
    ),
    # Per-mode capture safety for this thread: returns the previous mode through the same pointer.
    decl(
        "CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)",
        "cuThreadExchangeStreamCaptureMode",
        P(enum),
    ),
    # --- graphs and nodes
    decl("CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)", "cuGraphCreate", P(CUgraph), c_uint),
    decl("CUresult cuGraphDestroy(CUgraph hGraph)", "cuGraphDestroy", CUgraph),
    decl("CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)", "cuGraphClone", P(CUgraph), CUgraph),
    decl(
        "CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, "
        "const CUgraphNode *dependencies, size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)",
        "cuGraphAddKernelNode_v2",
        P(CUgraphNode),
        CUgraph,
        P(CUgraphNode),
        c_size_t,
        POINTER(CUDA_KERNEL_NODE_PARAMS),
    ),
    decl(
        "CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, "
        "const CUgraphNode *dependencies, size_t numDependencies)",
        "cuGraphAddEmptyNode",
        P(CUgraphNode),
        CUgraph,
        P(CUgraphNode),
        c_size_t,
    ),
    decl(
        "CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)",
        "cuGraphGetNodes",
        CUgraph,
        P(CUgraphNode),
        P(c_size_t),
    ),
    decl(
        "CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)",
        "cuGraphNodeGetType",
        CUgraphNode,
        P(enum),
    ),
    # Edges give the order of the nodes (the node list itself has none). edgeData is passed NULL: rawcuda
    # never sets edge data, and a graph that has some answers CUDA_ERROR_LOSSY_QUERY instead of dropping it.
    decl(
        "CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData, "
        "size_t *numEdges)",
        "cuGraphGetEdges_v2",
        CUgraph,
        P(CUgraphNode),
        P(CUgraphNode),
        c_void_p,
        P(c_size_t),
    ),
    decl(
        "CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)",
        "cuGraphKernelNodeGetParams_v2",
        CUgraphNode,
        POINTER(CUDA_KERNEL_NODE_PARAMS),
    ),
    decl(
        "CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)",
        "cuGraphKernelNodeSetParams_v2",
        CUgraphNode,
        POINTER(CUDA_KERNEL_NODE_PARAMS),
    ),
    decl("CUresult cuGraphDestroyNode(CUgraphNode hNode)", "cuGraphDestroyNode", CUgraphNode),
    # A kernel node's launch attributes (clusters, cooperative): the node params have no room for them.
    decl(
        "CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr, "
        "const CUkernelNodeAttrValue *value)",
        "cuGraphKernelNodeSetAttribute",
        CUgraphNode,
        enum,
        POINTER(CUlaunchAttributeValue),
    ),
    decl(
        "CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr, "
        "CUkernelNodeAttrValue *value_out)",
        "cuGraphKernelNodeGetAttribute",
        CUgraphNode,
        enum,
        POINTER(CUlaunchAttributeValue),
    ),
    decl(
        "CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)",
        "cuGraphDebugDotPrint",
        CUgraph,
        c_char_p,
        c_uint,
    ),
    # --- executable graphs
    # cuda.h maps cuGraphInstantiate to cuGraphInstantiateWithFlags: the oldest "cuGraphInstantiate"
    # symbol took error-node and log-buffer arguments instead of flags.
    decl(
        "CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)",
        "cuGraphInstantiateWithFlags",
        P(CUgraphExec),
        CUgraph,
        c_ulonglong,
    ),
    decl("CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)", "cuGraphUpload", CUgraphExec, CUstream),
    decl("CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)", "cuGraphLaunch", CUgraphExec, CUstream),
    decl("CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)", "cuGraphExecDestroy", CUgraphExec),
    decl(
        "CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)",
        "cuGraphExecUpdate_v2",
        CUgraphExec,
        CUgraph,
        POINTER(CUgraphExecUpdateResultInfo),
    ),
    # Change one kernel node's arguments (or grid) in an instantiated graph without re-instantiating.
    decl(
        "CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, "
        "const CUDA_KERNEL_NODE_PARAMS *nodeParams)",
        "cuGraphExecKernelNodeSetParams_v2",
        CUgraphExec,
        CUgraphNode,
        POINTER(CUDA_KERNEL_NODE_PARAMS),
    ),
]
