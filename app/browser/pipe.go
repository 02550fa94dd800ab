package browser

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// pipe is go-rod's cdp.WebSocketable over Chromium's --remote-debugging-pipe:
// Chromium reads commands from its fd 3 and writes replies and events to its
// fd 4, each message a JSON text ended by a NUL byte. Unlike a DevTools port,
// nothing else on the machine can reach it: the two fds exist only in
// Chromium and in this process.
type pipe struct {
	w  *os.File // our end of Chromium's fd 3
	r  *os.File // our end of Chromium's fd 4
	br *bufio.Reader

	wmu sync.Mutex // go-rod sends from several goroutines at once
}

// maxMessage bounds one message from Chromium (a full-page screenshot in
// base64 is the largest thing we ask for).
const maxMessage = 256 << 20

// newPipes makes the two pipes; childIn and childOut go to Chromium as its
// fds 3 and 4 and are closed here once it started.
func newPipes() (p *pipe, childIn, childOut *os.File, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("browser: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, fmt.Errorf("browser: pipe: %w", err)
	}
	return &pipe{w: inW, r: outR, br: bufio.NewReaderSize(outR, 64<<10)}, inR, outW, nil
}

// Send writes one message and its NUL terminator.
func (p *pipe) Send(data []byte) error {
	if bytes.IndexByte(data, 0) >= 0 {
		return errors.New("browser: a CDP message may not contain a NUL byte")
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	buf := make([]byte, 0, len(data)+1)
	buf = append(append(buf, data...), 0)
	if _, err := p.w.Write(buf); err != nil {
		return fmt.Errorf("browser: write to chromium: %w", err)
	}
	return nil
}

// Read returns the next message without its NUL terminator.
func (p *pipe) Read() ([]byte, error) {
	var msg []byte
	for {
		chunk, err := p.br.ReadSlice(0)
		msg = append(msg, chunk...)
		if err == nil {
			return msg[:len(msg)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil, fmt.Errorf("browser: chromium closed its DevTools pipe: %w", io.EOF)
			}
			return nil, fmt.Errorf("browser: read from chromium: %w", err)
		}
		if len(msg) > maxMessage {
			return nil, fmt.Errorf("browser: a message from chromium exceeds %d MiB", maxMessage>>20)
		}
	}
}

// Close ends both of our ends; a Read in progress returns an error.
func (p *pipe) Close() error {
	return errors.Join(p.w.Close(), p.r.Close())
}
