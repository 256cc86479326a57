<?xml version="1.0" encoding="UTF-8"?>
<!--
  The HelloWorld partner service of the SimpleInvoke processes: the answer of JBossWS's
  HelloWorld sample, `Hello NAME. Sincerely, JBossWS`, for a SOAP 1.1 sayHello request.
  The proxy in simple-invoke.yaml checks the request's shape before this runs.
-->
<xsl:stylesheet version="1.0"
    xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"
    xmlns:hw="http://jboss.org/samples/helloworld"
    exclude-result-prefixes="hw">
  <!-- The media type makes the answer text/xml; charset=UTF-8 whatever the request's charset. -->
  <xsl:output method="xml" media-type="text/xml" encoding="UTF-8" omit-xml-declaration="yes"
      indent="no"/>

  <xsl:template match="/">
    <soapenv:Envelope>
      <soapenv:Body>
        <hw:sayHelloResponse xmlns:hw="http://jboss.org/samples/helloworld">
          <return>
            <xsl:text>Hello </xsl:text>
            <xsl:value-of select="/soapenv:Envelope/soapenv:Body/hw:sayHello/toWhom"/>
            <xsl:text>. Sincerely, JBossWS</xsl:text>
          </return>
        </hw:sayHelloResponse>
      </soapenv:Body>
    </soapenv:Envelope>
  </xsl:template>
</xsl:stylesheet>
