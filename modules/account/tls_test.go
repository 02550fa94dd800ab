package account

import "crypto/tls"

var tlsState tls.ConnectionState
