package server

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/plugin"
)

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
