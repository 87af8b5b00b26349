package broker_test

import (
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

func exampleStore() (*broker.Broker, func()) {
	dir, err := os.MkdirTemp("", "kdb-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := kdb.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	b, err := broker.Open(db)
	if err != nil {
		log.Fatal(err)
	}
	return b, func() {
		if err := db.Close(); err != nil {
			log.Fatal(err)
		}
		_ = os.RemoveAll(dir)
	}
}

// A broker publishes persistent messages to a queue, a consumer reads them
// in order and acks them. A resent message is recognized as a duplicate.
func ExampleBroker_Send() {
	b, done := exampleStore()
	defer done()

	for i := 1; i <= 3; i++ {
		m := &broker.Message{
			ID:          fmt.Sprintf("ID:producer-1:%d", i),
			ProducerID:  "producer-1",
			ProducerSeq: uint64(i),
			Properties:  map[string]string{"JMSType": "order"},
			Body:        []byte(fmt.Sprintf("order #%d", i)),
		}
		seq, err := b.Send(broker.Queue, "orders", m) // durable on return
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("sent", m.ID, "as", seq)
	}
	// The producer retries its second message after a failover.
	_, err := b.Send(broker.Queue, "orders", &broker.Message{ID: "ID:producer-1:2", ProducerID: "producer-1", ProducerSeq: 2})
	fmt.Println("resend is a duplicate:", errors.Is(err, broker.ErrDuplicate))

	// Consume: read in order, ack what was processed.
	msgs, err := b.Read(broker.Queue, "orders", 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("got %d: %s (%s)\n", m.Seq, m.Body, m.Properties["JMSType"])
		if err := b.Ack(broker.Queue, "orders", m.Seq); err != nil {
			log.Fatal(err)
		}
	}
	info, _ := b.Destination(broker.Queue, "orders")
	fmt.Println("left:", info.Count, "next seq:", info.NextSeq)
	// Output:
	// sent ID:producer-1:1 as 1
	// sent ID:producer-1:2 as 2
	// sent ID:producer-1:3 as 3
	// resend is a duplicate: true
	// got 1: order #1 (order)
	// got 2: order #2 (order)
	// got 3: order #3 (order)
	// left: 0 next seq: 4
}

// Durable subscribers on a topic each have their own position and acks; a
// message is kept until every subscription acked it.
func ExampleBroker_Subscribe() {
	b, done := exampleStore()
	defer done()

	for _, sub := range []string{"billing", "audit"} {
		if err := b.Subscribe("prices", sub); err != nil {
			log.Fatal(err)
		}
	}
	for i, p := range []string{"ACME 10.5", "ACME 10.7"} {
		if _, err := b.Send(broker.Topic, "prices", &broker.Message{ID: fmt.Sprint("tick-", i), Body: []byte(p)}); err != nil {
			log.Fatal(err)
		}
	}
	// billing consumes both; audit is offline.
	msgs, _ := b.ReadSub("prices", "billing", 0, 10)
	for _, m := range msgs {
		fmt.Println("billing got", string(m.Body))
		_ = b.AckSub("prices", "billing", m.Seq)
	}
	pb, _ := b.Pending("prices", "billing")
	pa, _ := b.Pending("prices", "audit")
	info, _ := b.Destination(broker.Topic, "prices")
	fmt.Println("pending: billing", pb, "audit", pa, "- kept:", info.Count)

	// audit comes back and catches up.
	msgs, _ = b.ReadSub("prices", "audit", 0, 10)
	for _, m := range msgs {
		_ = b.AckSub("prices", "audit", m.Seq)
	}
	info, _ = b.Destination(broker.Topic, "prices")
	fmt.Println("after audit acked", len(msgs), "- kept:", info.Count)
	// Output:
	// billing got ACME 10.5
	// billing got ACME 10.7
	// pending: billing 0 audit 2 - kept: 2
	// after audit acked 2 - kept: 0
}

// A transaction consumes a message from one queue and produces its result
// on another, atomically; a two-phase transaction is prepared first and
// survives a crash until it is committed or rolled back.
func ExampleBroker_BeginTx() {
	b, done := exampleStore()
	defer done()

	if _, err := b.Send(broker.Queue, "requests", &broker.Message{ID: "req-1", Body: []byte("2+2")}); err != nil {
		log.Fatal(err)
	}

	// Local transaction: ack the request and send the reply together.
	tx := b.BeginTx()
	_ = tx.Ack(broker.Queue, "requests", 1)
	_ = tx.Send(broker.Queue, "replies", &broker.Message{ID: "rep-1", Body: []byte("4")})
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// Two-phase (XA): prepare, then commit later (also after a restart).
	xa := b.BeginTx()
	_ = xa.Send(broker.Queue, "replies", &broker.Message{ID: "rep-2", Body: []byte("5")})
	if err := xa.Prepare("xid-42"); err != nil {
		log.Fatal(err)
	}
	xids, _ := b.Prepared()
	fmt.Println("prepared:", xids)
	if err := b.CommitPrepared("xid-42"); err != nil {
		log.Fatal(err)
	}

	for _, d := range must(b.Destinations()) {
		fmt.Printf("%s %s: %d messages\n", d.Kind, d.Name, d.Count)
	}
	// Output:
	// prepared: [xid-42]
	// queue replies: 2 messages
	// queue requests: 0 messages
}

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
