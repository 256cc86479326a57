<?xml version="1.0" encoding="UTF-8"?>
<!-- XSLTProxy request transform (docs/scenarios.md, XSLTProxy): every element name of buyStocks
     spelled backwards, in a new SOAP 1.1 envelope holding only a Body (the Header is dropped).
     Document order and values are unchanged; no indentation, no XML declaration. -->
<xsl:stylesheet version="1.0"
    xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"
    xmlns:m="http://services.samples/xsd"
    exclude-result-prefixes="m">
  <xsl:output method="xml" omit-xml-declaration="yes" indent="no"/>

  <xsl:template match="/">
    <soapenv:Envelope>
      <soapenv:Body>
        <xsl:apply-templates select="soapenv:Envelope/soapenv:Body/m:buyStocks"/>
      </soapenv:Body>
    </soapenv:Envelope>
  </xsl:template>

  <xsl:template match="m:buyStocks">
    <m:skcotSyub>
      <xsl:apply-templates select="order"/>
    </m:skcotSyub>
  </xsl:template>

  <xsl:template match="order">
    <redro>
      <lobmys><xsl:value-of select="symbol"/></lobmys>
      <DIreyub><xsl:value-of select="buyerID"/></DIreyub>
      <ecirp><xsl:value-of select="price"/></ecirp>
      <emulov><xsl:value-of select="volume"/></emulov>
    </redro>
  </xsl:template>
</xsl:stylesheet>
