package metadata

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"slices"
)

// ScramMechanisms are the SCRAM mechanisms by Kafka's ScramMechanism code
// (1 SCRAM-SHA-256, 2 SCRAM-SHA-512), as AlterUserScramCredentials uses.
var ScramMechanisms = map[int8]string{1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}

// NewScramCredential derives what the broker stores from the salted
// password a client sends in AlterUserScramCredentials (RFC 5802): the
// stored key H(HMAC(salted, "Client Key")) and the server key
// HMAC(salted, "Server Key"). The salted password itself is not kept.
func NewScramCredential(user, mechanism string, salt, salted []byte, iterations int32) (ScramCredential, error) {
	h, err := scramHash(mechanism)
	if err != nil {
		return ScramCredential{}, err
	}
	ck := hmacSum(h, salted, []byte("Client Key"))
	sh := h()
	sh.Write(ck)
	return ScramCredential{
		User: user, Mechanism: mechanism, Salt: slices.Clone(salt), Iterations: iterations,
		StoredKey: sh.Sum(nil), ServerKey: hmacSum(h, salted, []byte("Server Key")),
	}, nil
}

func scramHash(mechanism string) (func() hash.Hash, error) {
	switch mechanism {
	case ScramMechanisms[1]:
		return sha256.New, nil
	case ScramMechanisms[2]:
		return sha512.New, nil
	}
	return nil, fmt.Errorf("SCRAM mechanism %q is not SCRAM-SHA-256 or SCRAM-SHA-512", mechanism)
}

func hmacSum(h func() hash.Hash, key, msg []byte) []byte {
	mac := hmac.New(h, key)
	mac.Write(msg)
	return mac.Sum(nil)
}
