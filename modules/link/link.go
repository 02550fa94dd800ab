// Package link is the panel link that the agent and the enrolled assistant
// share: the panel's address and the transport it may use, the token file,
// the TLS client, the dial, hello and welcome, and the reconnect schedule
// with its retirement rule (docs/PROTOCOL.md, "Authentication retries").
// What a role does once welcomed is the role's own.
//
// The checks of the configuration (WebSocketURL, ReadTokenFile, Client)
// return errors that name the flag to fix; the role wraps them with its
// name and its own configuration error.
package link
