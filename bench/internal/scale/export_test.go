package scale

// ParseRequests is parseRequests, for the tests.
var ParseRequests = parseRequests
