package server

import (
	"context"
	"reflect"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

const apiKeyApiVersions = 18

// apiName names a key for logs and metric labels.
func apiName(key int16) string {
	if name := kmsg.NameForKey(key); name != "" {
		return name
	}
	return "Unknown"
}

// requestName names a request for metric labels by its Go type, so that a
// plugin's API gets its own name: key 94 is kmsg's UnregisterController
// but the mirror plugin's CreateMirror.
func requestName(req kmsg.Request) string {
	t := reflect.TypeOf(req)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.TrimSuffix(t.Name(), "Request")
}

// apiVersions serves ApiVersions: what it takes of the broker.
type apiVersions struct {
	apis    *apiTable
	nodeID  int32
	plugins []any
	applied *appliedState
}

func (v *apiVersions) handle(_ context.Context, _ *RequestContext, req *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = v.apis.Versions()
	// KIP-1242: a client that names the cluster and node it expects to
	// reach, and reached another, must rediscover the cluster from its
	// seeds (an address reused by a different broker).
	if req.ClusterID != nil && (*req.ClusterID != v.applied.get().ClusterID || req.NodeID != v.nodeID) {
		resp.ErrorCode = kerr.RebootstrapRequired.Code
	}
	// -1 says "no finalized features epoch": nothing to negotiate.
	resp.FinalizedFeaturesEpoch = -1
	if _, ok := txnCoordinator(v.plugins).(plugin.TxnPartitionAdder); ok {
		// transaction.version 2 (KIP-890 part 2): clients skip
		// AddPartitionsToTxn, Produce v12+ adds the partition, and EndTxn
		// v5 bumps the epoch. The level is fixed by the code (one node,
		// one binary), so the epoch never changes. Feature fields are
		// tagged fields of v3+: older requests never see them.
		resp.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{{Name: "transaction.version", MinVersion: 0, MaxVersion: 2}}
		resp.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{{Name: "transaction.version", MinVersionLevel: 2, MaxVersionLevel: 2}}
		resp.FinalizedFeaturesEpoch = 1
	}
	return resp, nil
}

// apiVersionsUnsupported is the KIP-511 answer to an ApiVersions request
// newer than we know: a v0 body with UNSUPPORTED_VERSION that still lists
// our keys, so the client can retry at a version we serve.
func apiVersionsUnsupported(apis *apiTable) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = apis.Versions()
	return resp
}
