package server

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterOperations are the ACL operations that apply to the cluster
// resource (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
// ALTER_CONFIGS, IDEMPOTENT_WRITE) as a bit field; without an authorizer
// every one of them is allowed.
const clusterOperations int32 = 1<<5 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12

// handleDescribeCluster describes the registered brokers and the
// controller. Tandem's brokers are not separately addressable controllers,
// so a request for the controller endpoints is UNSUPPORTED_ENDPOINT_TYPE,
// as a Kafka broker answers.
func (b *Broker) handleDescribeCluster(ctx context.Context, rc *RequestContext, req *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = cfgStr("The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
		return resp, nil
	}
	img := b.image()
	resp.ClusterID, resp.ControllerID = img.ClusterID, img.ControllerID
	for _, br := range sortedBrokers(img) {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = br.ID, br.Host, br.Port
		if br.Rack != "" {
			rb.Rack = cfgStr(br.Rack)
		}
		resp.Brokers = append(resp.Brokers, rb)
	}
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = clusterOperations
	}
	return resp, nil
}
