package server

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDescribeCluster describes the registered brokers and the
// controller. Tandem's brokers are not separately addressable controllers,
// so a request for the controller endpoints is UNSUPPORTED_ENDPOINT_TYPE,
// as a Kafka broker answers.
func (b *Broker) handleDescribeCluster(ctx context.Context, rc *RequestContext, req *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil
	}
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = cfgStr("The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
		return resp, nil
	}
	img := b.image()
	resp.ClusterID, resp.ControllerID = img.ClusterID, img.ControllerID
	for _, br := range sortedBrokers(img) {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID = br.ID
		rb.Host, rb.Port = endpointFor(br, rc.Listener)
		if br.Rack != "" {
			rb.Rack = cfgStr(br.Rack)
		}
		resp.Brokers = append(resp.Brokers, rb)
	}
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = rc.AuthorizedOps(kmsg.ACLResourceTypeCluster, clusterName, clusterOps...)
	}
	return resp, nil
}
