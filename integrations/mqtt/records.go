package kdbmqtt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The hook's indexes, in namespace Namespace of the store. Values are
// mochi's storage types, as the Stored* events hand them to the server:
// storage.Message in encodeMessage's binary form, storage.Client,
// storage.Subscription and storage.SystemInfo in their JSON; a fan-out
// record is the hook's own (encodeKeyList).
const (
	// Namespace is the kdb namespace the hook keeps its indexes in.
	Namespace = "mq"

	idxClients  = "cl"  // client ID → storage.Client
	idxSubs     = "sub" // client ID, 0, filter → storage.Subscription
	idxRetained = "ret" // topic → storage.Message
	idxInflight = "if"  // client ID, 0, packet ID (2 bytes, big endian) → storage.Message
	idxPending  = "pub" // sequence (8 bytes, big endian) → storage.Message: acknowledged, not yet fanned out
	idxFanout   = "fan" // sequence (8 bytes, BE), part (4 bytes, BE) → inflight keys of a split fan-out's part
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

// fanoutKey is the key of part part of the split fan-out of pending
// publish seq (fanKeyLen bytes).
func fanoutKey(seq uint64, part uint32) []byte {
	return binary.BigEndian.AppendUint32(pendingKey(seq), part)
}

// encodeKeyList is the value of a fan-out record: the number of keys, then
// each key, each as a uvarint and the bytes.
func encodeKeyList(keys [][]byte) []byte {
	n := binary.MaxVarintLen64
	for _, k := range keys {
		n += binary.MaxVarintLen64 + len(k)
	}
	b := binary.AppendUvarint(make([]byte, 0, n), uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, string(k))
	}
	return b
}

// decodeKeyList reads encodeKeyList's form (errMalformed if it does not
// decode). The keys are copies.
func decodeKeyList(v []byte) ([][]byte, error) {
	r := reader{b: v}
	n := r.uvarint("key count", uint64(len(v)))
	keys := make([][]byte, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		k := r.bytes("key")
		if r.err == nil && len(k) == 0 {
			r.fail("key")
		}
		keys = append(keys, k)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the record", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: fan-out record: %v", errMalformed, r.err)
	}
	return keys, nil
}

// retRefFormat is the first byte of a retained record that stands for a
// pending publish's message (encodeRetainedRef): OnPublish writes it in the
// commit of the pending record of a retained QoS 1 or 2 PUBLISH, so that
// the message is retained in the same commit that makes it published
// again after a crash; OnRetainMessage replaces it with the message, and
// load resolves one a crash left (resolveRetainedRefs).
const retRefFormat = 0x02

// retRefLen is the length of a retained reference: retRefFormat and the
// pending publish's sequence (8 bytes, big endian).
const retRefLen = 9

func encodeRetainedRef(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{retRefFormat}, seq)
}

// decodeRetainedRef returns the sequence of the pending publish a retained
// record stands for, if it is a reference.
func decodeRetainedRef(v []byte) (uint64, bool) {
	if len(v) != retRefLen || v[0] != retRefFormat {
		return 0, false
	}
	return binary.BigEndian.Uint64(v[1:]), true
}

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

// decodeMessage reads a message record: the hook's binary encoding
// (encodeMessage), or the JSON of storage.Message that earlier versions of
// the hook wrote (it starts with '{').
func decodeMessage(v []byte, what string) (storage.Message, error) {
	var m storage.Message
	err := decodeMessageInto(&m, v, what)
	return m, err
}

// decodeMessageInto is decodeMessage into *m, which must be zero. It keeps
// nothing of v.
func decodeMessageInto(m *storage.Message, v []byte, what string) error {
	if len(v) == 0 {
		return fmt.Errorf("%w: empty %s record", errMalformed, what)
	}
	switch v[0] {
	case msgFormat:
		r := reader{b: v[1:]}
		r.message(m)
		if r.err != nil {
			*m = storage.Message{}
			return fmt.Errorf("%w: %s: %v", errMalformed, what, r.err)
		}
	case '{':
		if err := m.UnmarshalBinary(v); err != nil {
			return fmt.Errorf("%w: %s: %v", errMalformed, what, err)
		}
	default:
		return fmt.Errorf("%w: %s record of unknown format %#x", errMalformed, what, v[0])
	}
	if m.FixedHeader.Qos > 2 {
		return fmt.Errorf("%w: %s record with QoS %d", errMalformed, what, m.FixedHeader.Qos)
	}
	return nil
}

// msgFormat is the first byte of a message record in the binary encoding
// (JSON records start with '{').
const msgFormat = 0x01

// encodeMessage is the stored form of a message (retained, inflight,
// pending): msgFormat, then the fields of storage.Message in a fixed
// order, strings and byte strings as a uvarint length and the bytes,
// numbers as varints. Its JSON (storage.Message.MarshalBinary) costs more
// to write and, at a restart with many retained messages, several times
// more to read (the payload is base64 in it).
func encodeMessage(m *storage.Message) []byte {
	p := &m.Properties
	n := 48 + len(m.T) + len(m.ID) + len(m.Client) + len(m.Origin) + len(m.TopicName) + len(m.Payload) +
		len(p.CorrelationData) + len(p.ContentType) + len(p.ResponseTopic) + 10*len(p.SubscriptionIdentifier)
	for _, u := range p.User {
		n += 4 + len(u.Key) + len(u.Val)
	}
	b := make([]byte, 0, n)
	b = append(b, msgFormat)
	for _, s := range []string{m.T, m.ID, m.Client, m.Origin, m.TopicName} {
		b = appendString(b, s)
	}
	var flags byte
	if m.FixedHeader.Dup {
		flags |= 1
	}
	if m.FixedHeader.Retain {
		flags |= 2
	}
	b = binary.AppendVarint(b, int64(m.FixedHeader.Remaining))
	b = append(b, m.FixedHeader.Type, m.FixedHeader.Qos, flags)
	b = binary.AppendVarint(b, m.Created)
	b = binary.AppendVarint(b, m.Sent)
	b = binary.BigEndian.AppendUint16(b, m.PacketID)
	b = appendString(b, string(m.Payload))
	b = appendString(b, string(p.CorrelationData))
	b = binary.AppendUvarint(b, uint64(len(p.SubscriptionIdentifier)))
	for _, id := range p.SubscriptionIdentifier {
		b = binary.AppendVarint(b, int64(id))
	}
	b = binary.AppendUvarint(b, uint64(len(p.User)))
	for _, u := range p.User {
		b = appendString(b, u.Key)
		b = appendString(b, u.Val)
	}
	b = appendString(b, p.ContentType)
	b = appendString(b, p.ResponseTopic)
	b = binary.AppendUvarint(b, uint64(p.MessageExpiryInterval))
	b = binary.AppendUvarint(b, uint64(p.TopicAlias))
	var pf byte
	if p.PayloadFormatFlag {
		pf = 1
	}
	return append(b, p.PayloadFormat, pf)
}

// encodedMessageSize returns len(encodeMessage(m)), without encoding it.
func encodedMessageSize(m *storage.Message) int {
	p := &m.Properties
	n := 1
	for _, s := range []string{m.T, m.ID, m.Client, m.Origin, m.TopicName} {
		n += stringSize(len(s))
	}
	n += varintSize(int64(m.FixedHeader.Remaining)) + 3
	n += varintSize(m.Created) + varintSize(m.Sent) + 2
	n += stringSize(len(m.Payload)) + stringSize(len(p.CorrelationData))
	n += uvarintSize(uint64(len(p.SubscriptionIdentifier)))
	for _, id := range p.SubscriptionIdentifier {
		n += varintSize(int64(id))
	}
	n += uvarintSize(uint64(len(p.User)))
	for _, u := range p.User {
		n += stringSize(len(u.Key)) + stringSize(len(u.Val))
	}
	n += stringSize(len(p.ContentType)) + stringSize(len(p.ResponseTopic))
	n += uvarintSize(uint64(p.MessageExpiryInterval)) + uvarintSize(uint64(p.TopicAlias))
	return n + 2
}

func stringSize(n int) int { return uvarintSize(uint64(n)) + n }

func uvarintSize(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

func varintSize(v int64) int {
	u := uint64(v) << 1 // binary.AppendVarint's zig-zag
	if v < 0 {
		u = ^u
	}
	return uvarintSize(u)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes encodeMessage's fields; the first error sticks, and every
// read after it returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated or damaged at %s", what)
	}
	r.b = nil
}

func (r *reader) uvarint(what string, max uint64) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte(what string) byte {
	if len(r.b) < 1 {
		r.fail(what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// raw returns a length-prefixed byte string (aliasing the record).
func (r *reader) raw(what string) []byte {
	n := r.uvarint(what, uint64(len(r.b)))
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) string(what string) string { return string(r.raw(what)) }

// bytes is raw, copied (nil if empty).
func (r *reader) bytes(what string) []byte {
	s := r.raw(what)
	if len(s) == 0 {
		return nil
	}
	return bytes.Clone(s)
}

func (r *reader) message(m *storage.Message) {
	m.T = r.string("type")
	m.ID = r.string("id")
	m.Client = r.string("client")
	m.Origin = r.string("origin")
	m.TopicName = r.string("topic")
	m.FixedHeader.Remaining = int(r.varint("remaining length"))
	m.FixedHeader.Type = r.byte("packet type")
	m.FixedHeader.Qos = r.byte("qos")
	flags := r.byte("flags")
	m.FixedHeader.Dup, m.FixedHeader.Retain = flags&1 != 0, flags&2 != 0
	m.Created = r.varint("created")
	m.Sent = r.varint("sent")
	if hi, lo := r.byte("packet id"), r.byte("packet id"); r.err == nil {
		m.PacketID = uint16(hi)<<8 | uint16(lo)
	}
	m.Payload = r.bytes("payload")
	p := &m.Properties
	p.CorrelationData = r.bytes("correlation data")
	if n := r.uvarint("subscription identifiers", uint64(len(r.b))); n > 0 {
		p.SubscriptionIdentifier = make([]int, n)
		for i := range p.SubscriptionIdentifier {
			p.SubscriptionIdentifier[i] = int(r.varint("subscription identifier"))
		}
	}
	if n := r.uvarint("user properties", uint64(len(r.b)/2)); n > 0 {
		p.User = make([]packets.UserProperty, n)
		for i := range p.User {
			p.User[i].Key = r.string("user property")
			p.User[i].Val = r.string("user property")
		}
	}
	p.ContentType = r.string("content type")
	p.ResponseTopic = r.string("response topic")
	p.MessageExpiryInterval = uint32(r.uvarint("message expiry", 1<<32-1))
	p.TopicAlias = uint16(r.uvarint("topic alias", 1<<16-1))
	p.PayloadFormat = r.byte("payload format")
	p.PayloadFormatFlag = r.byte("payload format flag") != 0
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the record", len(r.b))
	}
}
