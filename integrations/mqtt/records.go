package kdbmqtt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The hook's indexes, in namespace Namespace of the store. Values are the
// JSON of mochi's storage types (storage.Client, storage.Subscription,
// storage.Message, storage.SystemInfo), so that a record reads back as the
// Stored* events hand it to the server.
const (
	// Namespace is the kdb namespace the hook keeps its indexes in.
	Namespace = "mq"

	idxClients  = "cl"  // client ID → storage.Client
	idxSubs     = "sub" // client ID, 0, filter → storage.Subscription
	idxRetained = "ret" // topic → storage.Message
	idxInflight = "if"  // client ID, 0, packet ID (2 bytes, big endian) → storage.Message
	idxPending  = "pub" // sequence (8 bytes, big endian) → storage.Message: acknowledged, not yet fanned out
	idxSys      = "sys" // "info" → storage.SystemInfo
)

// Key parts longer than these (MQTT allows 65,535 bytes) are replaced by
// a hash so that every key fits kdb.MaxKeySize; the value keeps the name.
const (
	maxClientPart = 200
	maxNamePart   = 300
)

var sysKey = []byte("info")

// part returns s as a key part: s itself, or 0x01 followed by the hex
// SHA-256 of s when s is long or starts with 0x01 (so the two forms never
// collide). MQTT strings hold no U+0000, so 0 separates parts.
func part(s string, max int) []byte {
	if len(s) <= max && (len(s) == 0 || s[0] != 1) {
		return []byte(s)
	}
	sum := sha256.Sum256([]byte(s))
	return append([]byte{1}, hex.EncodeToString(sum[:])...)
}

func clientKey(id string) []byte { return part(id, maxClientPart) }

func clientPrefix(id string) []byte { return append(clientKey(id), 0) }

func subKey(client, filter string) []byte {
	return append(clientPrefix(client), part(filter, maxNamePart)...)
}

func retainedKey(topic string) []byte { return part(topic, maxNamePart) }

func inflightKey(client string, id uint16) []byte {
	return binary.BigEndian.AppendUint16(clientPrefix(client), id)
}

func pendingKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// errMalformed marks a stored record the hook cannot use.
var errMalformed = errors.New("kdbmqtt: malformed record")

// messageOf is the storable form of a PUBLISH (or of an ack kept inflight).
func messageOf(t, client string, pk packets.Packet) storage.Message {
	props := pk.Properties.Copy(false)
	return storage.Message{
		T:           t,
		Client:      client,
		Origin:      pk.Origin,
		FixedHeader: pk.FixedHeader,
		TopicName:   pk.TopicName,
		Payload:     pk.Payload,
		Created:     pk.Created,
		PacketID:    pk.PacketID,
		Properties: storage.MessageProperties{
			PayloadFormat:          props.PayloadFormat,
			PayloadFormatFlag:      props.PayloadFormatFlag,
			MessageExpiryInterval:  props.MessageExpiryInterval,
			ContentType:            props.ContentType,
			ResponseTopic:          props.ResponseTopic,
			CorrelationData:        props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier,
			User:                   props.User, // no TopicAlias: it is the connection's
		},
	}
}

// clientOf is the storable form of a client's session. maxExpiry is the
// server's MaximumSessionExpiryInterval, which the CONNACK applies.
func clientOf(cl *mqtt.Client, maxExpiry uint32) storage.Client {
	props := cl.Properties.Props.Copy(false)
	expiry := props.SessionExpiryInterval
	if maxExpiry > 0 && expiry > maxExpiry {
		expiry = maxExpiry
	}
	return storage.Client{
		ID:              cl.ID,
		T:               storage.ClientKey,
		Remote:          cl.Net.Remote,
		Listener:        cl.Net.Listener,
		Username:        cl.Properties.Username,
		Clean:           cl.Properties.Clean,
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     expiry,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	}
}

func marshal(v interface{ MarshalBinary() ([]byte, error) }) []byte {
	b, err := v.MarshalBinary()
	if err != nil {
		// The storage types hold strings, byte slices and numbers only.
		panic(fmt.Sprintf("kdbmqtt: encoding %T: %v", v, err))
	}
	return b
}

// decode helpers: each returns errMalformed (wrapping the cause) for a
// record that does not decode or lacks what the server needs.

func decodeClient(v []byte) (storage.Client, error) {
	var c storage.Client
	if len(v) == 0 {
		return c, fmt.Errorf("%w: empty client record", errMalformed)
	}
	if err := c.UnmarshalBinary(v); err != nil {
		return c, fmt.Errorf("%w: client: %v", errMalformed, err)
	}
	if c.ID == "" {
		return c, fmt.Errorf("%w: client record without an ID", errMalformed)
	}
	return c, nil
}

func decodeSub(v []byte) (storage.Subscription, error) {
	var s storage.Subscription
	if len(v) == 0 {
		return s, fmt.Errorf("%w: empty subscription record", errMalformed)
	}
	if err := s.UnmarshalBinary(v); err != nil {
		return s, fmt.Errorf("%w: subscription: %v", errMalformed, err)
	}
	if s.Client == "" || s.Filter == "" || s.Qos > 2 {
		return s, fmt.Errorf("%w: subscription record client=%q filter=%q qos=%d", errMalformed, s.Client, s.Filter, s.Qos)
	}
	return s, nil
}

func decodeMessage(v []byte, what string) (storage.Message, error) {
	var m storage.Message
	if len(v) == 0 {
		return m, fmt.Errorf("%w: empty %s record", errMalformed, what)
	}
	if err := m.UnmarshalBinary(v); err != nil {
		return m, fmt.Errorf("%w: %s: %v", errMalformed, what, err)
	}
	if m.FixedHeader.Qos > 2 {
		return m, fmt.Errorf("%w: %s record with QoS %d", errMalformed, what, m.FixedHeader.Qos)
	}
	return m, nil
}
