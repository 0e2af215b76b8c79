package network

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"hash"
	"net"
	"slices"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/security"
)

// Login checks the user and password of an HTTP Basic login (the
// console's) as a SASL login is checked: under the same throttle,
// against the PLAIN users of every SASL listener and the SCRAM
// credentials of the metadata, counted in the same metrics.
type Login struct {
	Listeners []*Listener
	Throttle  *security.Throttle
	Metrics   *Metrics
	Image     func() *metadata.Image // called only when no PLAIN user matches
}

// Check checks user and password from remoteAddr: nil if they match,
// security.ErrAuth if they do not, or the throttle's or ctx's error.
func (l Login) Check(ctx context.Context, remoteAddr, user, password string) error {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	wait, err := l.Throttle.Admit(host, user)
	if err != nil {
		l.Metrics.AuthThrottled.Inc()
		return err
	}
	l.Metrics.AuthThrottleWait.Add(wait.Seconds())
	if err := sleep(ctx, wait); err != nil {
		return err
	}
	if user == "" || !checkPassword(l.Listeners, l.Image, user, password) {
		l.Throttle.Failed(host, user)
		l.Metrics.AuthFailures.Inc()
		return security.ErrAuth
	}
	l.Throttle.Succeeded(host, user)
	return nil
}

// checkPassword runs the PLAIN mechanism of every SASL listener of ls
// that enables it, then compares the password's SCRAM keys with those
// stored in the latest image (image, called only then).
func checkPassword(ls []*Listener, image func() *metadata.Image, user, password string) bool {
	msg := []byte("\x00" + user + "\x00" + password)
	for _, l := range ls {
		if l.IsSASL() && slices.Contains(l.SASL.Mechanisms, security.MechPlain) {
			if _, done, err := l.SASL.Start(security.MechPlain, nil).Step(msg); err == nil && done {
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
