-- wrk: POSTs the file named by the BODY environment variable, as JSON, over and over. The one
-- script of every admission benchmark (webhook/bench/run.sh and the Rust benches of tests/,
-- which include it).
local file = assert(io.open(os.getenv("BODY"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
