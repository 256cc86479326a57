-- wrk script: POST the file named by $BODY as a buyStocks SOAP request (docs/scenarios.md).
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "text/xml; charset=UTF-8"
wrk.headers["SOAPAction"] = os.getenv("SOAPACTION") or '"urn:buyStocks.2"'
wrk.headers["routing"] = "xadmin;server1;community#1.0##"
