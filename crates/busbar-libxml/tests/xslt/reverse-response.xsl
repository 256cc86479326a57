<?xml version="1.0" encoding="UTF-8"?>
<!-- XSLTProxy response transform (docs/scenarios.md, XSLTProxy): the inverse of
     reverse-request.xsl. Maps skcotSyub/redro/lobmys/DIreyub/ecirp/emulov back to
     buyStocks/order/symbol/buyerID/price/volume in a Body-only SOAP 1.1 envelope. -->
<xsl:stylesheet version="1.0"
    xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"
    xmlns:m="http://services.samples/xsd"
    exclude-result-prefixes="m">
  <xsl:output method="xml" omit-xml-declaration="yes" indent="no"/>

  <xsl:template match="/">
    <soapenv:Envelope>
      <soapenv:Body>
        <xsl:apply-templates select="soapenv:Envelope/soapenv:Body/m:skcotSyub"/>
      </soapenv:Body>
    </soapenv:Envelope>
  </xsl:template>

  <xsl:template match="m:skcotSyub">
    <m:buyStocks>
      <xsl:apply-templates select="redro"/>
    </m:buyStocks>
  </xsl:template>

  <xsl:template match="redro">
    <order>
      <symbol><xsl:value-of select="lobmys"/></symbol>
      <buyerID><xsl:value-of select="DIreyub"/></buyerID>
      <price><xsl:value-of select="ecirp"/></price>
      <volume><xsl:value-of select="emulov"/></volume>
    </order>
  </xsl:template>
</xsl:stylesheet>
