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

// apiVersions is exactly what this broker serves: ApiVersions tells the
// truth, and a request for a key or version outside it closes the
// connection. Minimums follow what current clients need: Fetch from v4
// (record batches with LastStableOffset, what the Java 4.x client requires),
// Produce from v0 (message sets are refused per batch, not per request),
// ListOffsets from v1 (kafka-go uses v1).
var apiVersions = []kmsg.ApiVersionsResponseApiKey{
	{ApiKey: 0, MinVersion: 0, MaxVersion: 13}, // Produce (v13: topic IDs)
	{ApiKey: 1, MinVersion: 4, MaxVersion: 18}, // Fetch (v13+: topic IDs)
	{ApiKey: 2, MinVersion: 1, MaxVersion: 10}, // ListOffsets
	{ApiKey: 3, MinVersion: 0, MaxVersion: 13}, // Metadata
	{ApiKey: 17, MinVersion: 0, MaxVersion: 1}, // SaslHandshake
	{ApiKey: 18, MinVersion: 0, MaxVersion: 5}, // ApiVersions (v5: KIP-1242 cluster/node check)
	{ApiKey: 19, MinVersion: 2, MaxVersion: 8}, // CreateTopics (8: KIP-1279's MirrorInfo)
	{ApiKey: 20, MinVersion: 1, MaxVersion: 6}, // DeleteTopics
	{ApiKey: 21, MinVersion: 0, MaxVersion: 2}, // DeleteRecords
	{ApiKey: 22, MinVersion: 0, MaxVersion: 5}, // InitProducerId
	{ApiKey: 23, MinVersion: 2, MaxVersion: 4}, // OffsetForLeaderEpoch
	{ApiKey: 32, MinVersion: 1, MaxVersion: 4}, // DescribeConfigs
	{ApiKey: 35, MinVersion: 1, MaxVersion: 4}, // DescribeLogDirs
	{ApiKey: 36, MinVersion: 0, MaxVersion: 2}, // SaslAuthenticate
	{ApiKey: 33, MinVersion: 0, MaxVersion: 2}, // AlterConfigs
	{ApiKey: 37, MinVersion: 0, MaxVersion: 3}, // CreatePartitions
	{ApiKey: 43, MinVersion: 0, MaxVersion: 2}, // ElectLeaders
	{ApiKey: 44, MinVersion: 0, MaxVersion: 1}, // IncrementalAlterConfigs
	{ApiKey: 45, MinVersion: 0, MaxVersion: 1}, // AlterPartitionReassignments
	{ApiKey: 46, MinVersion: 0, MaxVersion: 0}, // ListPartitionReassignments
	{ApiKey: 60, MinVersion: 0, MaxVersion: 2}, // DescribeCluster (v2: fenced brokers)
	{ApiKey: 61, MinVersion: 0, MaxVersion: 0}, // DescribeProducers
	{ApiKey: 75, MinVersion: 0, MaxVersion: 0}, // DescribeTopicPartitions
}

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

func (b *Broker) handleApiVersions(_ context.Context, _ *RequestContext, req *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = b.apis.versions
	// KIP-1242: a client that names the cluster and node it expects to
	// reach, and reached another, must rediscover the cluster from its
	// seeds (an address reused by a different broker).
	if req.ClusterID != nil && (*req.ClusterID != b.image().ClusterID || req.NodeID != b.cfg.NodeID) {
		resp.ErrorCode = kerr.RebootstrapRequired.Code
	}
	// -1 says "no finalized features epoch": nothing to negotiate.
	resp.FinalizedFeaturesEpoch = -1
	if _, ok := b.txnCoordinator().(plugin.TxnPartitionAdder); ok {
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
func (b *Broker) apiVersionsUnsupported() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = b.apis.versions
	return resp
}
