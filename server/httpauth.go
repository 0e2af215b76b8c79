package server

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/server/network"
)

// Authorizing reports whether an authorizer is installed: then HTTP pages
// that show cluster data (the console) ask for a user and password.
func (b *Broker) Authorizing() bool { return b.authz != nil }

// Authenticate checks an HTTP Basic user and password from remoteAddr
// against the broker's SASL users, PLAIN (every SASL listener's) and SCRAM
// (the metadata quorum's credentials), under the same throttle as SASL
// logins, and that the user may Describe the cluster (else the error
// wraps kerr.ClusterAuthorizationFailed). It returns the principal,
// "User:<name>". The SCRAM credentials are the applied image's: the
// HTTP endpoint may be asked before the metadata quorum is open (tandem
// serve binds it first), when there are none yet.
func (b *Broker) Authenticate(ctx context.Context, remoteAddr, user, password string) (string, error) {
	login := network.Login{Listeners: b.listeners, Throttle: b.throttle, Metrics: b.m.net, Image: b.applied.get}
	if err := login.Check(ctx, remoteAddr, user, password); err != nil {
		return "", err
	}
	principal := "User:" + user
	rc := &RequestContext{Principal: principal, ClientAddr: remoteAddr, Authorizer: b.authz}
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName) {
		return "", fmt.Errorf("%s may not describe the cluster: %w", principal, kerr.ClusterAuthorizationFailed)
	}
	return principal, nil
}
