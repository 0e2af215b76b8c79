// Package security holds how a client proves who it is to a broker: the
// server side of the SASL mechanisms (PLAIN, SCRAM-SHA-256/512,
// OAUTHBEARER with locally held issuer keys), their configuration from
// Kafka's listener properties, and the throttle that slows down
// password guessing. The connection that runs an exchange is package
// network's (server/network/auth.go).
package security

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// SASL mechanisms.
const (
	MechPlain       = "PLAIN"
	MechScram256    = "SCRAM-SHA-256"
	MechScram512    = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// SASLConfig is one SASL listener's authentication setup.
type SASLConfig struct {
	Mechanisms []string
	// plain holds the PLAIN users and passwords: from the Tandem key
	// tandem.sasl.plain.users ("alice:secret,bob:pw"), and from Kafka's
	// JAAS form, [listener.name.<l>.]plain.sasl.jaas.config with
	// user_<name>="<password>" options.
	Plain map[string]string
	oauth *oauthConfig
	fake  scramFaker
}

var jaasUser = regexp.MustCompile(`user_([^=\s]+)\s*=\s*"([^"]*)"`)

func ParseSASL(get func(string) string) (*SASLConfig, error) {
	c := &SASLConfig{Plain: map[string]string{}}
	if users := get("tandem.sasl.plain.users"); users != "" {
		for _, up := range strings.Split(users, ",") {
			u, pw, ok := strings.Cut(strings.TrimSpace(up), ":")
			if !ok || u == "" {
				return nil, fmt.Errorf("tandem.sasl.plain.users: %q is not user:password", up)
			}
			c.Plain[u] = pw
		}
	}
	for _, m := range jaasUser.FindAllStringSubmatch(get("plain.sasl.jaas.config"), -1) {
		c.Plain[m[1]] = m[2]
	}
	var err error
	if c.oauth, err = parseOAuth(get); err != nil {
		return nil, err
	}
	if ms := get("sasl.enabled.mechanisms"); ms != "" {
		for _, m := range strings.Split(ms, ",") {
			m = strings.ToUpper(strings.TrimSpace(m))
			switch m {
			case MechPlain, MechScram256, MechScram512:
			case MechOAuthBearer:
				if c.oauth == nil {
					return nil, errors.New("OAUTHBEARER needs issuer keys (sasl.oauthbearer.jwks.endpoint.url=file:... or tandem.sasl.oauthbearer.public.keys)")
				}
			default:
				return nil, fmt.Errorf("sasl.enabled.mechanisms: %s is not supported", m)
			}
			c.Mechanisms = append(c.Mechanisms, m)
		}
	} else {
		c.Mechanisms = []string{MechPlain, MechScram256, MechScram512}
		if c.oauth != nil {
			c.Mechanisms = append(c.Mechanisms, MechOAuthBearer)
		}
	}
	return c, nil
}

// Mech is the server side of one SASL exchange.
type Mech interface {
	// Step consumes a client message and returns the server's answer;
	// done is true once the client is authenticated. An error fails the
	// authentication.
	Step(in []byte) (out []byte, done bool, err error)
	// Principal is the authenticated principal once done.
	Principal() string
	// Expiry is when the credential expires (zero: never), which bounds
	// the session lifetime (KIP-368).
	Expiry() time.Time
	// Claimed says whether Step(in) checks a credential, and whose ("":
	// the message names no user), so that the attempt can be throttled
	// before anything is checked.
	Claimed(in []byte) (user string, checks bool)
}

var ErrAuth = errors.New("invalid credentials")

func (c *SASLConfig) Start(mech string, img *metadata.Image) Mech {
	switch mech {
	case MechPlain:
		return &plainMech{users: c.Plain}
	case MechScram256:
		return &scramMech{mech: mech, h: sha256.New, img: img, fake: &c.fake}
	case MechScram512:
		return &scramMech{mech: mech, h: sha512.New, img: img, fake: &c.fake}
	case MechOAuthBearer:
		return &oauthMech{cfg: c.oauth}
	}
	return nil
}

// plainMech is RFC 4616: [authzid] NUL authcid NUL passwd.
type plainMech struct {
	users map[string]string
	user  string
}

func (m *plainMech) Step(in []byte) ([]byte, bool, error) {
	if m.user != "" {
		return nil, false, errors.New("PLAIN: unexpected message after authentication")
	}
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 {
		return nil, false, errors.New("PLAIN: malformed message")
	}
	authz, user, pw := string(parts[0]), string(parts[1]), parts[2]
	if authz != "" && authz != user {
		return nil, false, errors.New("PLAIN: authorization id differs from the user")
	}
	want, ok := m.users[user]
	// Compare even for unknown users so that timing does not reveal them.
	if subtle.ConstantTimeCompare([]byte(want), pw) != 1 || !ok || user == "" {
		return nil, false, ErrAuth
	}
	m.user = user
	return []byte{}, true, nil
}

func (m *plainMech) Principal() string { return "User:" + m.user }
func (m *plainMech) Expiry() time.Time { return time.Time{} }

func (m *plainMech) Claimed(in []byte) (string, bool) {
	parts := bytes.SplitN(in, []byte{0}, 3)
	if len(parts) < 2 {
		return "", true
	}
	return string(parts[1]), true
}

// scramMech is the server side of RFC 5802 SCRAM (RFC 7677 for SHA-256),
// without channel binding, against credentials stored in the metadata
// quorum. It takes exactly two client messages; anything after the final
// one (a replay) fails.
type scramMech struct {
	mech string
	h    func() hash.Hash
	img  *metadata.Image
	fake *scramFaker

	state       int // 0: want client-first, 1: want client-final, 2: done
	user        string
	cred        metadata.ScramCredential
	gs2         string
	clientFirst string // client-first-message-bare
	serverFirst string
	nonce       string
}

func (m *scramMech) Step(in []byte) ([]byte, bool, error) {
	switch m.state {
	case 0:
		return m.first(string(in))
	case 1:
		return m.final(string(in))
	}
	return nil, false, fmt.Errorf("%s: message after the exchange completed (replay?)", m.mech)
}

func (m *scramMech) first(msg string) ([]byte, bool, error) {
	// gs2-header: "n,," or "y,," (no channel binding), optional a=authzid.
	cbind, rest, ok := strings.Cut(msg, ",")
	if !ok || cbind != "n" && cbind != "y" {
		return nil, false, fmt.Errorf("%s: channel binding is not supported", m.mech)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, false, fmt.Errorf("%s: malformed client-first message", m.mech)
	}
	m.gs2 = cbind + "," + authz + ","
	attrs, err := scramAttrs(bare)
	if err != nil || attrs["n"] == "" || attrs["r"] == "" || attrs["m"] != "" {
		return nil, false, fmt.Errorf("%s: malformed client-first message", m.mech)
	}
	if attrs["tokenauth"] != "" {
		return nil, false, fmt.Errorf("%s: delegation tokens are not supported", m.mech)
	}
	user := strings.NewReplacer("=2C", ",", "=3D", "=").Replace(attrs["n"])
	if a := strings.TrimPrefix(authz, "a="); authz != "" && a != user {
		return nil, false, fmt.Errorf("%s: authorization id differs from the user", m.mech)
	}
	cred, ok := m.img.Scram[user][m.mech]
	if !ok {
		cred = m.fake.credential(m.img, user, m.mech, m.h)
	}
	var nb [24]byte
	rand.Read(nb[:])
	m.user, m.cred, m.clientFirst = user, cred, bare
	m.nonce = attrs["r"] + base64.RawURLEncoding.EncodeToString(nb[:])
	m.serverFirst = "r=" + m.nonce + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(int(cred.Iterations))
	m.state = 1
	return []byte(m.serverFirst), false, nil
}

func (m *scramMech) final(msg string) ([]byte, bool, error) {
	m.state = 2 // one attempt only
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, false, fmt.Errorf("%s: client-final message without proof", m.mech)
	}
	withoutProof := msg[:i]
	attrs, err := scramAttrs(withoutProof)
	if err != nil {
		return nil, false, fmt.Errorf("%s: malformed client-final message", m.mech)
	}
	proof, err := base64.StdEncoding.DecodeString(msg[i+3:])
	if err != nil {
		return nil, false, fmt.Errorf("%s: malformed proof", m.mech)
	}
	if attrs["c"] != base64.StdEncoding.EncodeToString([]byte(m.gs2)) {
		return nil, false, fmt.Errorf("%s: channel binding mismatch", m.mech)
	}
	// Kafka accepts a nonce that ends with the combined one (librdkafka
	// sends its client nonce once more in front); anything else is a
	// forged or replayed final message.
	r := attrs["r"]
	if len(r) < len(m.nonce) || subtle.ConstantTimeCompare([]byte(r[len(r)-len(m.nonce):]), []byte(m.nonce)) != 1 {
		return nil, false, fmt.Errorf("%s: nonce mismatch", m.mech)
	}
	authMsg := []byte(m.clientFirst + "," + m.serverFirst + "," + withoutProof)
	sig := hmacSum(m.h, m.cred.StoredKey, authMsg)
	if len(proof) != len(sig) {
		return nil, false, ErrAuth
	}
	clientKey := make([]byte, len(sig))
	for i := range sig {
		clientKey[i] = proof[i] ^ sig[i]
	}
	h := m.h()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), m.cred.StoredKey) != 1 {
		return nil, false, ErrAuth
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacSum(m.h, m.cred.ServerKey, authMsg))), true, nil
}

func (m *scramMech) Principal() string { return "User:" + m.user }
func (m *scramMech) Expiry() time.Time { return time.Time{} }

// Claimed: only the final message checks the password; the first one
// names the user but checks nothing (an unknown user gets a made-up
// salt, see fakeScram).
func (m *scramMech) Claimed([]byte) (string, bool) { return m.user, m.state == 1 }

// scramFaker makes up the credential of a user that does not exist, so
// that SCRAM does not tell who does: the exchange goes on and fails at the
// final message, exactly as a known user's with a wrong password. The
// made-up salt and iteration count must not change between attempts (a
// fresh salt each time would give the user away) and no client may be able
// to compute them: they derive from a key hashed from every stored
// credential, secret material that every broker of the cluster shares. The
// iteration count and salt length are those of the mechanism's first
// stored credential (by user name), else 4096 and 32 bytes.
type scramFaker struct {
	mu    sync.Mutex
	img   *metadata.Image // the image key and typical were derived from
	key   []byte
	typic map[string]metadata.ScramCredential // by mechanism
}

func (f *scramFaker) credential(img *metadata.Image, user, mech string, h func() hash.Hash) metadata.ScramCredential {
	f.mu.Lock()
	if f.img != img {
		sum, typic := sha256.New(), map[string]metadata.ScramCredential{}
		for _, u := range slices.Sorted(maps.Keys(img.Scram)) {
			for _, m := range slices.Sorted(maps.Keys(img.Scram[u])) {
				c := img.Scram[u][m]
				sum.Write(c.StoredKey)
				sum.Write(c.ServerKey)
				if _, ok := typic[m]; !ok {
					typic[m] = c
				}
			}
		}
		f.img, f.key, f.typic = img, sum.Sum(nil), typic
	}
	key, typical := f.key, f.typic[mech]
	f.mu.Unlock()
	saltLen, iterations := 32, int32(4096)
	if len(typical.Salt) > 0 {
		saltLen, iterations = len(typical.Salt), typical.Iterations
	}
	derive := func(what string) []byte { return hmacSum(h, key, []byte(what+"\x00"+mech+"\x00"+user)) }
	salt := derive("salt")
	for len(salt) < saltLen {
		salt = append(salt, derive("salt"+strconv.Itoa(len(salt)))...)
	}
	return metadata.ScramCredential{User: user, Mechanism: mech, Salt: salt[:saltLen], Iterations: iterations,
		StoredKey: derive("stored"), ServerKey: derive("server")}
}

// scramAttrs splits "k=v,k=v"; values may contain '='.
func scramAttrs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad attribute %q", kv)
		}
		out[k] = v
	}
	return out, nil
}

func hmacSum(h func() hash.Hash, key, msg []byte) []byte {
	mac := hmac.New(h, key)
	mac.Write(msg)
	return mac.Sum(nil)
}
