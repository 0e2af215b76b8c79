package server

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"fmt"
	"hash"
	"net"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/security"
)

// Authorizing reports whether an authorizer is installed: then HTTP pages
// that show cluster data (the console) ask for a user and password.
func (b *Broker) Authorizing() bool { return b.authz != nil }

// Authenticate checks an HTTP Basic user and password from remoteAddr
// against the broker's SASL users, PLAIN (every SASL listener's) and SCRAM
// (the metadata quorum's credentials), under the same throttle as SASL
// logins, and that the user may Describe the cluster (else the error
// wraps kerr.ClusterAuthorizationFailed). It returns the principal,
// "User:<name>".
func (b *Broker) Authenticate(ctx context.Context, remoteAddr, user, password string) (string, error) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	wait, err := b.throttle.Admit(host, user)
	if err != nil {
		b.m.authThrottled.Inc()
		return "", err
	}
	b.m.authThrottleWait.Add(wait.Seconds())
	if err := sleep(ctx, wait); err != nil {
		return "", err
	}
	if user == "" || !checkPassword(b.listeners, b.meta.Image, user, password) {
		b.throttle.Failed(host, user)
		b.m.authFailures.Inc()
		return "", security.ErrAuth
	}
	b.throttle.Succeeded(host, user)
	principal := "User:" + user
	rc := &RequestContext{Principal: principal, ClientAddr: remoteAddr, Authorizer: b.authz}
	if !rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName) {
		return "", fmt.Errorf("%s may not describe the cluster: %w", principal, kerr.ClusterAuthorizationFailed)
	}
	return principal, nil
}

// checkPassword runs the PLAIN mechanism of every SASL listener of ls
// that enables it, then compares the password's SCRAM keys with those
// stored in the latest image (image, called only then).
func checkPassword(ls []*listener, image func() *metadata.Image, user, password string) bool {
	msg := []byte("\x00" + user + "\x00" + password)
	for _, l := range ls {
		if l.isSASL() && slices.Contains(l.sasl.Mechanisms, security.MechPlain) {
			if _, done, err := l.sasl.Start(security.MechPlain, nil).Step(msg); err == nil && done {
				return true
			}
		}
	}
	img := image()
	for mech, stored := range img.Scram[user] {
		if scramMatches(mech, stored, password) {
			return true
		}
	}
	return false
}

func scramMatches(mech string, stored metadata.ScramCredential, password string) bool {
	h := map[string]func() hash.Hash{security.MechScram256: sha256.New, security.MechScram512: sha512.New}[mech]
	if h == nil {
		return false
	}
	salted, err := pbkdf2.Key(h, password, stored.Salt, int(stored.Iterations), h().Size())
	if err != nil {
		return false
	}
	got, err := metadata.NewScramCredential(stored.User, mech, stored.Salt, salted, stored.Iterations)
	return err == nil && subtle.ConstantTimeCompare(got.StoredKey, stored.StoredKey) == 1
}
